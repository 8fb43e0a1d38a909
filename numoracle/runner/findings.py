"""A fuzz run's findings in an example database: the shrunk case of each finding, kept
under a key of the operator, kernel and mode, replayed first by the next run, and
forgotten once it no longer fails; one outside the operator's domain (changed since) is not
replayed, and the run says so.

Why not Hypothesis's own use of the database: a search whose settings name a database
keeps a Pareto front of every case's ``target()`` scores beside its failures, and with
two continuous targets that front changes on most cases. Keeping it cost 1.3 ms a case
on this project's CPU (docs/results/2026-12-05-fuzz-database.md), as much as the rest of
Hypothesis's time, for a front that only seeds the next run with high scores. So the
search runs without a database, and what a finding needs - its replay - is kept here.

Entries are JSON (``Case.to_dict``), stored through the ``ExampleDatabase`` interface,
so any Hypothesis database (a directory, in memory, shared) holds them. An entry that
does not parse as a case of this operator is skipped, and the run says so; nothing read
back is unpickled or evaluated."""

from __future__ import annotations

import hashlib
import json

from ..strategies.cases import Case

_PREFIX = b"numoracle-findings:"


def key(op_name: str, kspec: str, mode: str) -> bytes:
    """The database key of one operator, kernel and mode's findings."""
    digest = hashlib.sha256(f"{op_name}\0{kspec}\0{mode}".encode()).hexdigest()[:32]
    return _PREFIX + digest.encode()


def encode(case: Case) -> bytes:
    return json.dumps(case.to_dict(), sort_keys=True, separators=(",", ":")).encode()


class Findings:
    """The findings of one (operator, kernel, mode) in ``db`` (a Hypothesis
    ``ExampleDatabase``, or None: then nothing is kept)."""

    def __init__(self, db, op_name: str, kspec: str, mode: str, domain=None):
        self.db, self.op_name, self.domain = db, op_name, domain
        self.key = key(op_name, kspec, mode)
        self.replayed: dict = {}       # Case -> its stored bytes, for the cases load() returned

    def load(self) -> tuple[list, list]:
        """(cases, warnings): the stored findings, oldest first as the database gives them,
        and a line for each entry that is not a case of this operator."""
        if self.db is None:
            return [], []
        cases, warnings = [], []
        for raw in self.db.fetch(self.key):
            try:
                d = json.loads(raw.decode())
                case = Case.from_dict(d)
                if case.op != self.op_name:
                    raise ValueError(f"a case of {case.op!r}")
            except Exception as exc:  # noqa: BLE001 - a bad entry is reported and skipped, never fatal
                warnings.append(f"the example database holds an entry under {self.key.decode()} that is not a "
                                f"case of {self.op_name} ({type(exc).__name__}: {exc}); it was skipped. Delete "
                                f"the database directory (or pass a new one) to drop it.")
                continue
            why = self.domain.outside(case) if self.domain is not None else None
            if why is not None:
                # the operator's domain changed since the finding: a case it no longer holds
                # would fail (or pass) for reasons the run is not about
                warnings.append(f"the example database keeps a finding outside {self.op_name}'s domain now "
                                f"({case!r}: {why}); it was not replayed. Widen the domain to judge it "
                                f"again, or delete the database directory (or pass a new one) to drop it.")
                continue
            if case not in self.replayed:
                self.replayed[case] = raw
                cases.append(case)
        return cases, warnings

    def save(self, case: Case) -> None:
        if self.db is not None:
            self.db.save(self.key, encode(case))

    def passed(self, case: Case) -> None:
        """A replayed case ran without a finding: it is forgotten (the kernel was fixed)."""
        raw = self.replayed.pop(case, None)
        if raw is not None and self.db is not None:
            self.db.delete(self.key, raw)
