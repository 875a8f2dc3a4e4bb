"""One exception for bad input, so the CLI can turn it into one line and exit code 2."""


class UsageError(ValueError):
    """Bad input from a user: a flag, a spec, a preset name, a policy or a trace.

    The message names the problem and the valid range; the CLI prints it as one
    line and exits with code 2.
    """


def check_range(field: str, value: int, lo: int, hi: int, unit: str = "") -> int:
    """Return `value` if lo <= value <= hi, else raise a UsageError naming the field."""
    if not lo <= value <= hi:
        suffix = f" {unit}" if unit else ""
        raise UsageError(f"{field}={value} is out of range: valid {lo}..{hi}{suffix}")
    return value
