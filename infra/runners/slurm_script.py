"""The sbatch script of runner 'slurm': :func:`render_script` and the per-node wrapper.

:func:`render_script` turns a :class:`~alflow.frameworks.launch.Launch` and :class:`~alflow.config.SlurmOptions`
into an sbatch script (a jinja2 template; every value shell-quoted with :func:`shlex.quote`, and
values on ``#SBATCH`` lines refused when they would need quoting, since sbatch does not parse shell
quotes there). :data:`NODE_WRAPPER` is what srun runs on every node. :mod:`alflow_infra.runners.slurm`
describes the job's whole life.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import jinja2

from alflow.config import SlurmOptions
from alflow.frameworks.launch import Launch
from alflow_infra.errors import RunnerError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

NODE_WRAPPER = """\
shopt -u patsub_replacement 2>/dev/null || true
first="$1" nnodes="$2" nhead="$3"
shift 3
rank="${SLURM_NODEID:?alflow: SLURM_NODEID is not set (not in a Slurm job step)}"
mapfile -t addrs <<< "${ALFLOW_NODE_ADDRS:?alflow: ALFLOW_NODE_ADDRS is not set}"
head="${addrs[$first]:?alflow: no address for node $first}"
if [ "$rank" -eq 0 ] || [ "$#" -eq "$nhead" ]; then
  args=("${@:1:nhead}")
else
  args=("${@:nhead+1}")
fi
args=("${args[@]//@ALFLOW_NODE_RANK@/"$rank"}")
args=("${args[@]//@ALFLOW_HEAD_ADDR@/"$head"}")
args=("${args[@]//@ALFLOW_NNODES@/"$nnodes"}")
for i in "${!addrs[@]}"; do
  args=("${args[@]//"@ALFLOW_NODE_ADDR_$i@"/"${addrs[$i]}"}")
done
exec "${args[@]}"
"""
"""The per-node wrapper that srun runs on every node (as ``bash -c WRAPPER alflow-node ...``).

Positional parameters: the program's first node in the job, its node count, the length of the head's
argument list, the head's arguments, then the workers' arguments (none: the head's run everywhere).
It takes the node's rank from ``SLURM_NODEID`` (relative to the job step, so 0 on each group's first
node), the addresses from ``ALFLOW_NODE_ADDRS`` (one per line, in job node order, resolved by the batch
script), replaces the placeholders by bash pattern substitution (no eval: values never become code),
and execs the result. It holds no single quote, so the script carries it in single quotes.
"""

SCRIPT_TEMPLATE = """\
#!/bin/bash
# Rendered by alflow (runner 'slurm'): {{ framework }} server, model {{ model }}.
#SBATCH --job-name={{ job_name }}
#SBATCH --nodes={{ nodes }}
#SBATCH --ntasks-per-node={{ tasks_per_node }}
{% if gpus_per_node is not none -%}
#SBATCH --gpus-per-node={{ gpus_per_node }}
{% endif -%}
{% if partition -%}
#SBATCH --partition={{ partition }}
{% endif -%}
{% if account -%}
#SBATCH --account={{ account }}
{% endif -%}
#SBATCH --time={{ time_limit }}
#SBATCH --output={{ log_path }}
#SBATCH --open-mode=append
{% if comment -%}
#SBATCH --comment={{ comment }}
{% endif -%}
{% for arg in extra_sbatch_args -%}
#SBATCH {{ arg }}
{% endfor -%}
set -eo pipefail
{% for module in modules -%}
module load {{ module }}
{% endfor -%}
{% for name, value in env -%}
export {{ name }}={{ value }}
{% endfor -%}
mapfile -t ALFLOW_NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [ "${#ALFLOW_NODES[@]}" -ne {{ nodes }} ]; then
  echo "alflow: expected {{ nodes }} node(s) in '$SLURM_JOB_NODELIST', got ${#ALFLOW_NODES[@]}" >&2
  exit 1
fi
alflow_node_addr() {  # the node's NodeAddr (its name when Slurm knows no address)
  local line
  line="$(scontrol show node -o "$1")" || line=""
  if [[ "$line" =~ (^|[[:space:]])NodeAddr=([^[:space:]]+) ]]; then
    printf '%s\\n' "${BASH_REMATCH[2]}"
  else
    printf '%s\\n' "$1"
  fi
}
ALFLOW_ADDRS=()
for alflow_node in "${ALFLOW_NODES[@]}"; do
  ALFLOW_ADDRS+=("$(alflow_node_addr "$alflow_node")")
done
ALFLOW_NODE_ADDRS="$(printf '%s\\n' "${ALFLOW_ADDRS[@]}")"
ALFLOW_HEAD_NODE="${ALFLOW_NODES[0]}"
ALFLOW_HEAD_ADDR="${ALFLOW_ADDRS[0]}"
export ALFLOW_NODE_ADDRS ALFLOW_HEAD_NODE ALFLOW_HEAD_ADDR
export ALFLOW_NNODES="$SLURM_JOB_NUM_NODES"
echo "alflow: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST (head $ALFLOW_HEAD_NODE at $ALFLOW_HEAD_ADDR)"
ALFLOW_NODE_WRAPPER='{{ wrapper }}'
{% if not steps -%}
exec srun --nodes={{ nodes }} --ntasks={{ nodes * tasks_per_node }} --ntasks-per-node={{ tasks_per_node }} --kill-on-bad-exit=1 \\
{%- if mpi %}
    --mpi={{ mpi }} \\
{%- endif %}
{%- for arg in container_args %}
    {{ arg }} \\
{%- endfor %}
    bash -c "$ALFLOW_NODE_WRAPPER" alflow-node {{ command }}
{% else -%}
# Disaggregated: one background srun step per group on its own nodes (the frontend shares the first
# node, hence --overlap); the first step to end, for any reason, ends the job.
alflow_pids=()
{% for step in steps -%}
echo "alflow: starting {{ step.name }} on node(s) {{ step.first_node }}..{{ step.first_node + step.nodes - 1 }}"
srun --nodes={{ step.nodes }} --ntasks={{ step.nodes }} --ntasks-per-node=1 --relative={{ step.first_node }} --kill-on-bad-exit=1 \\
{%- if step.overlap %}
    --overlap \\
{%- endif %}
{%- for arg in container_args %}
    {{ arg }} \\
{%- endfor %}
    bash -c "$ALFLOW_NODE_WRAPPER" alflow-node {{ step.command }} &
alflow_pids+=("$!")
{% endfor -%}
alflow_status=0
wait -n || alflow_status=$?
echo "alflow: a job step ended (exit status $alflow_status): stopping the others" >&2
kill "${alflow_pids[@]}" 2>/dev/null || true
wait || true
exit $((alflow_status == 0 ? 1 : alflow_status))
{% endif -%}
"""
"""The sbatch script; values arrive already quoted (see :func:`render_script`)."""

# A shell script, not HTML: autoescape is off and every value is shlex-quoted in render_script.
_ENVIRONMENT = jinja2.Environment(
    autoescape=False,  # noqa: S701
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    comment_start_string="<%#",  # bash's ${#array[@]} would open a jinja comment
    comment_end_string="#%>",
)
_TEMPLATE = _ENVIRONMENT.from_string(SCRIPT_TEMPLATE)


def _directive(value: str, what: str) -> str:
    """``value`` for an ``#SBATCH`` line: refused when it would need shell quoting (sbatch takes it raw)."""
    if not value or shlex.quote(value) != value:
        raise RunnerError(
            f"{what} {value!r} cannot go on an #SBATCH line (spaces, quotes or shell characters)"
        )
    return value


def wrapper_args(
    argv: Sequence[str], worker_argv: Sequence[str] | None, *, first_node: int, nodes: int
) -> list[str]:
    """The positional parameters of :data:`NODE_WRAPPER` for one program (see its docstring)."""
    return [str(first_node), str(nodes), str(len(argv)), *argv, *(worker_argv or ())]


@dataclass(frozen=True)
class _Step:
    """One background srun step of a disaggregated job (rendering only)."""

    name: str
    first_node: int
    nodes: int
    overlap: bool
    command: str


def job_gpus_per_node(launch: Launch, options: SlurmOptions) -> int | None:
    """GPUs requested per node: the options' when set (not fewer than the server uses), else the Launch's."""
    if options.gpus_per_node is None:
        return launch.gpus_per_node
    if launch.gpus_per_node is not None and options.gpus_per_node < launch.gpus_per_node:
        raise RunnerError(
            f"the Slurm options request gpus_per_node={options.gpus_per_node} but the {launch.framework} "
            f"server uses {launch.gpus_per_node} GPU(s) per node"
        )
    return options.gpus_per_node


def render_script(
    launch: Launch,
    options: SlurmOptions,
    *,
    log_path: str,
    extra_mounts: Sequence[str] = (),
    comment: str | None = None,
) -> str:
    """The sbatch script that runs ``launch`` as described by ``options``, its output going to ``log_path``.

    ``extra_mounts`` are pyxis mounts added to ``options.container_mounts`` (the runner mounts the job
    directory so launch files are found at the same path in the container); ``comment`` becomes the
    job's ``--comment`` (the runner writes ``alflow-run:<run id>`` so leftovers of a run can be found).
    Every node runs :data:`NODE_WRAPPER`, which fills the node placeholders of its argument list.
    """
    if "%" in log_path:
        raise RunnerError(f"log path {log_path!r} contains '%' (sbatch would expand it as a pattern)")
    for name in launch.env:
        if not _ENV_NAME.fullmatch(name):
            raise RunnerError(f"environment variable name {name!r} is not a valid shell name")
    nodes = launch.nodes  # the job's node count; options.nodes, when set, must agree with it
    if options.nodes is not None and options.nodes != nodes:
        raise RunnerError(
            f"the Slurm options ask for nodes={options.nodes} but the {launch.framework} server spans "
            f"{nodes} node(s) (the server config's nodes): drop the runner's nodes or make them equal"
        )
    mounts = (*options.container_mounts, *extra_mounts)
    steps: list[_Step] = []
    if launch.groups:
        frontend = wrapper_args(launch.argv, None, first_node=0, nodes=nodes)
        steps.append(_Step("frontend", 0, 1, True, shlex.join(frontend)))
        for group in launch.groups:
            args = wrapper_args(group.argv, group.worker_argv, first_node=group.first_node, nodes=group.nodes)
            steps.append(_Step(group.name, group.first_node, group.nodes, False, shlex.join(args)))
    return _TEMPLATE.render(
        framework=launch.framework,
        model=" ".join(launch.model.split()),
        job_name=_directive(options.job_name or f"alflow-{launch.framework}", "job name"),
        nodes=nodes,
        tasks_per_node=launch.tasks_per_node,
        mpi=launch.mpi,
        gpus_per_node=job_gpus_per_node(launch, options),
        partition=_directive(options.partition, "partition") if options.partition else None,
        account=_directive(options.account, "account") if options.account else None,
        time_limit=_directive(options.time_limit, "time limit"),
        log_path=_directive(log_path, "log path"),
        extra_sbatch_args=[_directive(arg, "sbatch argument") for arg in options.extra_sbatch_args],
        modules=[shlex.quote(module) for module in options.modules],
        env=[(name, shlex.quote(value)) for name, value in launch.env.items()],
        container_args=[  # pyxis
            f"--container-image={shlex.quote(options.container_image)}",
            *([f"--container-mounts={shlex.quote(','.join(mounts))}"] if mounts else []),
        ]
        if options.container_image
        else [],
        comment=_directive(comment, "job comment") if comment else None,
        wrapper=NODE_WRAPPER,
        command=shlex.join(wrapper_args(launch.argv, launch.worker_argv, first_node=0, nodes=nodes)),
        steps=steps,
    )


def url_host(address: str) -> str:
    """``address`` as the host part of a URL (an IPv6 address in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
