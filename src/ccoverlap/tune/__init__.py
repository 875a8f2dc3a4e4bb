"""`ccoverlap tune`: the best levers on the user's own command, kept only where measurably faster and equal in result.

`config` holds the options (validated before anything runs), `space` the candidates (the registry's levers that
apply here, at the values each lever lists to try, and the user's environment knobs), `trial` one run of the
command under one candidate (step times and a fingerprint of the trained parameters through the doctor's
capture), `search` the procedure (baseline, the doctor's ordering, successive halving, combination, confirmation),
`report` the table, JSON and chart. The search runs trials through a function it is given, so it is tested on
the CPU with fake trials.
"""
