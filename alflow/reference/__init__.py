"""The reference AL table.

Its model and rules (:mod:`.table`), its keys (:mod:`.key`), InferenceX's layout (:mod:`.inferencex` reads it,
:mod:`.inferencex_export` writes it).
"""
