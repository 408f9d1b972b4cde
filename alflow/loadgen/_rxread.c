/* One stamped read of a TCP socket for the fast transport (alflow/loadgen/fast.py).
 *
 * recv_stamped(fd, buffer) -> (size, age_ns): one recvmsg(2) into the writable buffer, and the age of the
 * data it read: CLOCK_REALTIME now minus the SCM_TIMESTAMPNS stamp the kernel put on the read's newest
 * segment (alflow/loadgen/rxstamp.py says what TCP reports). age_ns is -1 when the read carried no valid
 * stamp, and 0 for a stamp from the future (a wall-clock step). Errors raise OSError subclasses
 * (BlockingIOError for EAGAIN), as socket.recvmsg_into does.
 *
 * Why C: the same read through socket.recvmsg_into costs about 1.2 us more per read than uvloop's own
 * reads (the control-message list, its tuples and bytes, the result tuple, the timespec unpacking and
 * the clock call in Python); this costs about 0.5 us more (benchmarks/client_overhead.py, README).
 * The socket is non-blocking, so the GIL is kept through the call. The module is optional: without a
 * compiler the package installs without it and rxstamp.py's Python path does the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static PyObject *recv_stamped(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "recv_stamped(fd, buffer) takes 2 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "recv_stamped: fd must be a non-negative int");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    struct iovec iov = {view.buf, (size_t)view.len};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec)) * 2];
        struct cmsghdr align;
    } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    ssize_t size;
    do {
        size = recvmsg((int)fd, &msg, 0);
    } while (size < 0 && errno == EINTR && PyErr_CheckSignals() == 0);
    int err = errno;
    PyBuffer_Release(&view);
    if (size < 0) {
        if (PyErr_Occurred()) {
            return NULL; /* a signal handler raised */
        }
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    long long age = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
            c->cmsg_len < CMSG_LEN(sizeof(struct timespec))) {
            continue;
        }
        struct timespec stamp, now;
        memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
        if (stamp.tv_sec > 0 && stamp.tv_nsec >= 0 && stamp.tv_nsec < 1000000000L &&
            clock_gettime(CLOCK_REALTIME, &now) == 0) {
            age = (long long)(now.tv_sec - stamp.tv_sec) * 1000000000LL + (now.tv_nsec - stamp.tv_nsec);
            if (age < 0) {
                age = 0;
            }
        }
        break;
    }
    return Py_BuildValue("(nL)", (Py_ssize_t)size, age);
}

static PyMethodDef methods[] = {
    {"recv_stamped", (PyCFunction)(void (*)(void))recv_stamped, METH_FASTCALL,
     "recv_stamped(fd, buffer) -> (size, age_ns): one recvmsg and the age of its SCM_TIMESTAMPNS stamp (-1: none)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_rxread", "One stamped TCP read (see _rxread.c).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rxread(void) { return PyModule_Create(&module_def); }
