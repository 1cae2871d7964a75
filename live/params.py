"""Live parameters: change controller gains, target, reference and safety limits while
the loop runs (``hil set``, Foxglove's parameter panel).

A change is a set of ``key: value`` pairs of the config's own keys (``controller.kp``,
``safety.max_command``, ...). It goes through the same validation as the config
(settings.config.resolve on the run's config with the change applied: a bad key, type or
range is refused with its reason and nothing changes), then the controller is built
again from the new config (off the critical path) and its ``params`` and the command
limits are posted to the loop's mailbox (rt.live_mailbox). The loop takes them at the
next tick boundary and acknowledges with that tick; the change is then a ``param``
event of the telemetry log (tick, plant time, the new values, where it came from), so
that ``hil sim --replay LOG`` replays the run exactly (rt.replay). Refused changes are
``param_refused`` events.

Only values live in ``params`` and the limits can change: a change that would change
the controller's structure (its type, law, output, the size of its params) is refused.
The safety limits only come down: a change that would raise ``safety.max_command`` or
``safety.max_slew`` of any axis above what the run started with is refused (a live
channel must never let a command exceed what the config allowed).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import numpy as np

from hilrig.drivers.registry import command_unit
from hilrig.errors import ConfigError
from hilrig.controllers.limits import L_MAX, L_SLEW
from hilrig.settings.live_changes import changed_config, controller_arrays, live_keys
from hilrig.rt.live_mailbox import LV_ACK_SEQ, LV_ACK_TICK, LV_ACK_TIME, post_change
from hilrig.schema import Config

ACK_TIMEOUT = 2.0       # s: a running loop acknowledges within a tick or two


class LiveError(RuntimeError):
    """A change could not reach the loop (not started yet, ended)."""


@dataclass(frozen=True)
class Ack:
    """A change as the loop took it: at tick ``tick`` (plant time ``t``, s)."""

    tick: int
    t: float
    changes: dict


class LiveParameters:
    """The live parameters of one run: a hook of rt.session.Session / rt.loop.LinkLoop
    (``start(run)`` after the warm-up, ``stop()`` at the end).

    ``change`` may be called from any thread; changes are serialised (one in flight).
    ``listeners``: ``listener(ack)`` after each acknowledged change (the live view).
    """

    def __init__(self):
        self.cfg: Config | None = None
        self.listeners = []
        self._lock = threading.Lock()
        self._run = None
        self._stopped = False
        self._seq = 0
        self._refusal_window, self._refusals_suppressed = -1.0, 0   # _record_refusal

    def start(self, run) -> None:
        self.cfg = run.cfg
        self._run = run
        link = getattr(run, "link", None)
        self._unit = link.command_unit if link is not None else \
            command_unit(run.cfg.link.type, run.cfg.plant.drive)
        self._ceiling = run.limits.copy()        # the limits the run started with
        post_change(run.live_box.copy(), run.controller.params, run.limits, 1.0)   # compile

    def stop(self) -> None:
        """The loop has ended: no more changes (one waiting for its tick is refused)."""
        self._stopped = True

    def values(self) -> dict:
        """The current value of every live key (None: unset)."""
        if self.cfg is None:
            return {}
        raw = self.cfg.to_dict()
        return {key: raw[key.split(".")[0]][key.split(".", 1)[1]] for key in live_keys(self.cfg)}

    def change(self, changes: dict, source: str) -> Ack:
        """Validate, post and wait for the tick that took ``changes``; ConfigError (refused,
        nothing changed) or LiveError (the loop is not running)."""
        with self._lock:
            run = self._run
            if run is None or self._stopped:
                raise LiveError("the run is not running (not started yet, or ended)")
            try:
                cfg = changed_config(self.cfg, changes)
                params, limits = controller_arrays(cfg, self._unit, len(run.controller.params),
                                                   run.limits.shape[1])
                self._refuse_raised(limits)
            except ConfigError as exc:
                self._record_refusal(run, source, changes, str(exc))
                raise
            box = run.live_box
            self._seq += 1
            post_change(box, params, limits, float(self._seq))
            deadline = time.monotonic() + ACK_TIMEOUT
            while box[LV_ACK_SEQ] != self._seq:
                if self._stopped or time.monotonic() > deadline:
                    self._stopped = True    # a loop that does not tick takes no more changes
                    if box[LV_ACK_SEQ] == self._seq:
                        break
                    raise LiveError("the run ended before the change took effect")
                time.sleep(2e-4)
            new = cfg.to_dict()
            applied = {key: new[key.split(".")[0]][key.split(".", 1)[1]] for key in changes}
            ack = Ack(int(box[LV_ACK_TICK]), float(box[LV_ACK_TIME]), applied)
            self.cfg = cfg
            run.telemetry.event("param", t=ack.t, tick=ack.tick, changes=applied, source=source,
                                seq=self._seq)
        for listener in self.listeners:
            listener(ack)
        return ack

    def _refuse_raised(self, limits: np.ndarray) -> None:
        """ConfigError naming the first safety limit that ``limits`` would raise above the
        run's start."""
        for row, key in ((L_MAX, "safety.max_command"), (L_SLEW, "safety.max_slew")):
            raised = np.flatnonzero(limits[row] > self._ceiling[row])
            if raised.size:
                j = int(raised[0])
                raise ConfigError(
                    f"{key}: a live change may only lower a safety limit (axis {j + 1}: "
                    f"{limits[row, j]:g} {self._unit}{'/s' if row == L_SLEW else ''} asked, "
                    f"the run started with {self._ceiling[row, j]:g})")


    def _record_refusal(self, run, source: str, changes: dict, reason: str) -> None:
        """A ``param_refused`` event for the first refused change of each second, naming
        how many were refused since the last one recorded (``suppressed``): a flood of bad
        requests costs the log a few events a second. The request is kept short."""
        now = time.monotonic()
        if now - self._refusal_window < 1.0:
            self._refusals_suppressed += 1
            return
        request = {k[:100]: _plain(v) for k, v in list(changes.items())[:20]}
        text = json.dumps(request, default=str)
        run.telemetry.event("param_refused", source=source, reason=reason[:500],
                            request=request if len(text) <= 2000 else text[:2000] + "...",
                            suppressed=self._refusals_suppressed)
        self._refusal_window, self._refusals_suppressed = now, 0


def _plain(value):
    return value if isinstance(value, (int, float, str, bool, list)) else repr(value)
