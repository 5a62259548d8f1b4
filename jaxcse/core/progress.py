"""What a user sees while a long command runs: a tqdm bar on a terminal, a plain progress line elsewhere.

A bar is useless in a log file or a notebook's captured output, and silence is worse: when stderr is not a
terminal, ``Progress`` prints one line (done/total, rate, ETA and any values the caller sets, such as the loss)
to stdout at a steady interval, and at the end.
"""

from __future__ import annotations

import sys
import time


def _duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
  """Counts work done; a tqdm bar on a terminal, else a line every ``interval`` seconds.

  Args:
    total: units of work in all (steps, sentences, tasks).
    initial: units already done (a resumed run).
    unit: what a unit is called in the line ("step", "sent", "task").
    desc: what is being done.
    enabled: False shows nothing (the non-primary processes of a multi-host run, tests).
    interval: seconds between lines when stderr is not a terminal.
  """

  def __init__(
    self,
    total: int,
    *,
    initial: int = 0,
    unit: str = "step",
    desc: str = "",
    enabled: bool = True,
    interval: float = 30.0,
    stream=None,
  ):
    self.total, self.done, self.unit, self.desc = total, initial, unit, desc
    self.enabled, self.interval = enabled, interval
    self.stream = stream or sys.stdout
    self.values: dict[str, str] = {}
    self.values_at: int | None = None
    self.t0 = self.t_last = time.time()
    self.start = initial
    # The rate is measured from the end of the first update on: the first unit's time is mostly compiling (a
    # jitted step, an embedder's first batch) and would make the first ETA hours long for a job of seconds.
    self.t_first: float | None = None
    self.done_first = initial
    self.bar = None
    if enabled and sys.stderr.isatty():
      from tqdm.auto import tqdm

      self.bar = tqdm(total=total, initial=initial, unit=unit, desc=desc or None, dynamic_ncols=True)

  def set(self, *, at: int | None = None, **values) -> None:
    """Values shown with the count (e.g. ``loss="6.59"``); shown on the bar or in the next line.

    ``at``: the unit the values are of (a step's loss); a line drawn after later units names it.
    """
    self.values.update({k: str(v) for k, v in values.items()})
    self.values_at = at
    if self.bar is not None:
      self.bar.set_postfix(self.values, refresh=False)

  def update(self, n: int = 1) -> None:
    self.done += n
    if self.t_first is None:
      self.t_first, self.done_first = time.time(), self.done
    if self.bar is not None:
      self.bar.update(n)
    elif self.enabled and time.time() - self.t_last >= self.interval:
      self._line()

  def line(self) -> str:
    """The plain progress line: ``desc: 120/7000 step (1.7%), 0.61 step/s, elapsed 3m15s, ETA 3h08m, loss 6.59``
    (``..., loss 6.59 (at step 100)`` when the values are of an earlier unit than the count).

    The rate (and so the ETA) counts the units done after the first update, over the time since it; until a second
    update there is none, and the line shows the count and the elapsed time only.
    """
    now = time.time()
    elapsed = now - self.t0
    measured = self.t_first is not None and self.done > self.done_first and now > self.t_first
    rate = (self.done - self.done_first) / (now - self.t_first) if measured else 0.0
    parts = [f"{self.done}/{self.total} {self.unit} ({100 * self.done / max(self.total, 1):.1f}%)"]
    if measured:
      parts.append(f"{rate:.3g} {self.unit}/s")
    parts.append(f"elapsed {_duration(elapsed)}")
    if self.done < self.total and rate > 0:
      parts.append(f"ETA {_duration((self.total - self.done) / rate)}")
    parts += [f"{k} {v}" for k, v in self.values.items()]
    if self.values and self.values_at is not None and self.values_at != self.done:
      parts[-1] += f" (at {self.unit} {self.values_at})"
    return (f"{self.desc}: " if self.desc else "") + ", ".join(parts)

  def _line(self) -> None:
    print(self.line(), file=self.stream, flush=True)
    self.t_last = time.time()

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()
    elif self.enabled and self.done > self.start:
      self._line()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
