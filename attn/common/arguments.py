"""argparse ``type=`` checks for the command lines' numbers: each wrong one is one sentence, before any work starts.

A number a command line takes is bounded above as well as below: ``--threads 1000000`` would start a million
threads, ``--steps 2**64`` would train past the end of the universe and ``--per-distance 1000000000`` would ask
for more memory than any machine has; each is refused while the arguments are read, with what to give instead.
"""

import argparse
import math
import os


def whole_number_argument(name, minimum, maximum, why=""):
    """An argparse ``type=`` that takes a whole number from ``minimum`` to ``maximum`` (``why``: the reason for it)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
        if not minimum <= value <= maximum:
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"{name} must be a whole number from {minimum:,} to {maximum:,}{reason}, got {text}")
        return value

    return parse


def number_argument(name, minimum, maximum, why="", below_maximum=False):
    """An argparse ``type=`` that takes a finite number from ``minimum`` to ``maximum`` (or below it)."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        too_high = value >= maximum if below_maximum else value > maximum
        if not math.isfinite(value) or value < minimum or too_high:
            upper = f"below {maximum:g}" if below_maximum else f"to {maximum:g}"
            reason = f" ({why})" if why else ""
            raise argparse.ArgumentTypeError(f"{name} must be a number from {minimum:g} {upper}{reason}, got {text}")
        return value

    return parse


def refuse_repeats(parser, args, *destinations):
    """argparse's error if a list argument (``--arms nope nope``) names one value twice: each run is made once."""
    for destination in destinations:
        values = getattr(args, destination)
        repeated = next((value for index, value in enumerate(values) if value in values[:index]), None)
        if repeated is not None:
            option = "--" + destination.replace("_", "-")
            parser.error(f"argument {option}: {repeated!r} is given twice; name each once (each run is made once)")


MAX_STEPS = 10**7  # ten million steps: weeks of training on a CPU, more than any of the course's runs
STEPS_WHY = "more would train for weeks"


def steps_argument(name="--steps"):
    """``--steps``: from 1 to ten million."""
    return whole_number_argument(name, 1, MAX_STEPS, STEPS_WHY)


def threads_argument(name="--threads"):
    """``--threads``: from 1 to the number of cores this machine has."""
    cores = os.cpu_count() or 1
    return whole_number_argument(name, 1, cores, f"this machine has {cores} cores")
