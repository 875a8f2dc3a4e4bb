from ccoverlap.cli import entry

entry()
