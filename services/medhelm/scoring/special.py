"""Special scorers of the MedHELM catalogue, merged into the metric registry: multiple choice, MedCalc-Bench,
MEDEC, EHRSQL execution accuracy and ICD-10 set F1 (one module each)."""

from __future__ import annotations

from medhelm.scoring import choice, ehrsql, icd10, medcalc, medec

FACTORIES = {**choice.FACTORIES, **medcalc.FACTORIES, **medec.FACTORIES, **ehrsql.FACTORIES, **icd10.FACTORIES}
