"""The contention doctor: profile an unmodified program and say why its communication is exposed.

`config` holds the options (importable without torch), `record` the files a capture leaves per rank
besides its trace, `capture` the part that runs inside the program (installed by the start-up hook,
ccoverlap/control/startup.py, as the program imports torch); the command is cli/doctor.py.
"""
