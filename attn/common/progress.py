"""Progress of long work on one line: step, loss, tokens per second and time left (lesson 13's training)."""

import math
import sys
import time

from attn.common.validate import positive_int, type_name, whole_count


class Progress:
    """One line that updates itself: step, loss, tokens per second, time left (plain lines when not a terminal)."""

    def __init__(self, total, start_step, stream=None):
        total, start_step = positive_int("total", total), whole_count("start_step", start_step)
        if stream is not None and not (callable(getattr(stream, "write", None)) and callable(getattr(stream, "isatty", None))):
            raise TypeError(f"stream must be a text stream (such as sys.stderr or io.StringIO()), got {type_name(stream)}")
        self.total, self.stream = total, stream or sys.stderr
        self.started, self.start_step = time.perf_counter(), start_step
        self.interactive = self.stream.isatty()

    def show(self, step, loss, tokens_per_step, held_out=None):
        whole_count("step", step)
        whole_count("tokens_per_step", tokens_per_step)
        for name, value in (("loss", loss), ("held_out", held_out)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise TypeError(f"{name} must be a number, got {type_name(value)}")
        elapsed = time.perf_counter() - self.started
        done = step - self.start_step
        rate = done * tokens_per_step / elapsed if elapsed > 0 else 0.0
        left = (self.total - step) * elapsed / done if done else float("nan")
        bar = "#" * int(20 * step / self.total)
        line = (f"[{bar:<20}] step {step}/{self.total}  loss {loss:.3f}  {rate:,.0f} tokens/s  "
                f"{_minutes(left)} left")
        if held_out is not None:
            line += f"  held-out {held_out:.3f}"
        if self.interactive:
            print("\r" + line, end="", file=self.stream, flush=True)
        elif held_out is not None or step == self.total:
            print(line, file=self.stream, flush=True)

    def close(self):
        if self.interactive:
            print(file=self.stream)


def _minutes(seconds):
    if not math.isfinite(seconds):
        return "?"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
