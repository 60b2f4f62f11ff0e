"""The flows a job runs, each top to bottom against a :class:`~orchestration.placement.Seat`:
:mod:`evaluate` (/evaluate and /validate) and :mod:`compare` (/compare, and each candidate of
/compare/batch). Each returns what it found as typed facts (:mod:`orchestration.facts`);
:mod:`orchestration.verdicts` assembles the result. Unit tests drive them with a fake seat
(``tests/unit/orchestration``)."""
