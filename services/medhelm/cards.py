"""The benchmark cards: what every part says about each of upstream MedHELM's benchmarks, written once.

A card is a benchmark's identity: its run-entry name, display name, place in the taxonomy, access level, the
stat its leaderboard column shows, the other rule's column shown beside it, whether the LLM jury scores it, its
main split and the other names HELM gives it.

Column names say what they compute, and upstream's names mean upstream's rules (docs/metrics.md, "Two rules,
two names"): multiple choice ranks by ``exact_match`` as HELM computes it, with our ``lenient_match`` beside;
the jury ranks by our ``jury_score_normalized`` (0-1, so category means and win rates mix it with the other
0-1 columns), with upstream's ``<name>_accuracy`` (the 1-5 mean MedHELM's leaderboard shows) beside. The catalogue (``benchmarks/catalogue_*.py``, the rows that load data and build prompts) takes these
fields from the card of the same name; the store reads them to import HELM's own runs (``store/helm_runs.py``)
and to make synthetic suites (``store/synthetic.py``). How many benchmarks there are is ``len(CARDS)``.

Data only (base level: imports the taxonomy and ``specs.Access``); nothing here raises at run time.
``tests/catalogue`` checks every card against the taxonomy and that the catalogue has exactly one row per card.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from medhelm.specs import Access
from medhelm.taxonomy import CATEGORIES

JURY_MAIN = "jury_score_normalized"  # our jury column: the 1-5 judge mean mapped to 0-1, comparable across columns
LENIENT_MATCH = "lenient_match"  # our multiple-choice rule ("A.", "(A)", "Answer: A" read), beside exact_match


@dataclass(frozen=True)
class BenchmarkCard:
    name: str  # the run-entry name (ours = upstream's)
    display_name: str
    category: str
    subcategory: str
    access: Access
    main_metric: str  # the stat our leaderboard column shows
    beside: tuple[str, ...] = ()  # the other rule's column(s), shown beside the main one (never ranked)
    jury: bool = False  # scored by the LLM jury; HELM's main stat is then ``<name>_accuracy``, a 1-5 mean
    main_split: str = "test"
    helm_aliases: tuple[str, ...] = ()  # other names HELM uses for the group / run entry

    @property
    def helm_main_stat(self) -> str:
        """The stat HELM's own leaderboard column shows for this benchmark (``import-helm`` reads it)."""
        return f"{self.name}_accuracy" if self.jury else self.main_metric

    @property
    def columns(self) -> tuple[str, ...]:
        """The main column, then the columns shown beside it."""
        return (self.main_metric, *self.beside)


_CDS, _CNG, _PCE, _MRA, _AW = CATEGORIES
PUBLIC, GATED, PRIVATE = Access.PUBLIC, Access.GATED, Access.PRIVATE


def _jury(name: str, display: str, category: str, subcategory: str, access: Access) -> BenchmarkCard:
    return BenchmarkCard(name, display, category, subcategory, access, JURY_MAIN, (f"{name}_accuracy",), jury=True)


def _em(name: str, display: str, category: str, subcategory: str, access: Access, **more: object) -> BenchmarkCard:
    """Multiple choice: HELM's strict ``exact_match`` ranks, our ``lenient_match`` beside it."""
    more.setdefault("beside", (LENIENT_MATCH,))
    return BenchmarkCard(name, display, category, subcategory, access, "exact_match", **more)  # type: ignore[arg-type]


# In taxonomy order (HELM's leaderboard order).
CARDS: tuple[BenchmarkCard, ...] = (
    BenchmarkCard("medcalc_bench", "MedCalc-Bench", _CDS, "Supporting Diagnostic Decisions",
                  PUBLIC, "medcalc_bench_accuracy", ("medcalc_bench_accuracy_lenient",)),
    _em("clear", "CLEAR", _CDS, "Supporting Diagnostic Decisions", PRIVATE),
    _jury("mtsamples_replicate", "MTSamples", _CDS, "Planning Treatments", PUBLIC),
    BenchmarkCard("medec", "Medec", _CDS, "Planning Treatments", PUBLIC, "medec_error_flag_accuracy",
                  ("medec_error_flag_accuracy_lenient",)),
    _em("ehrshot", "EHRSHOT", _CDS, "Predicting Patient Risks and Outcomes", GATED),
    _em("head_qa", "HeadQA", _CDS, "Providing Clinical Knowledge Support", PUBLIC),
    _em("medbullets", "Medbullets", _CDS, "Providing Clinical Knowledge Support", PUBLIC),
    _em("medhelm_med_qa", "MedQA", _CDS, "Providing Clinical Knowledge Support", PUBLIC, helm_aliases=("med_qa",)),
    _em("medhelm_med_mcqa", "MedMCQA", _CDS, "Providing Clinical Knowledge Support",
        PUBLIC, main_split="valid", helm_aliases=("med_mcqa",)),
    _jury("medalign", "MedAlign", _CDS, "Providing Clinical Knowledge Support", GATED),
    _em("shc_ptbm_med", "ADHD-Behavior", _CDS, "Providing Clinical Knowledge Support", PRIVATE),
    _em("shc_sei_med", "ADHD-MedEffects", _CDS, "Providing Clinical Knowledge Support", PRIVATE),
    _jury("dischargeme", "DischargeMe", _CNG, "Documenting Patient Visits", GATED),
    _jury("aci_bench", "ACI-Bench", _CNG, "Documenting Patient Visits", PUBLIC),
    _jury("mtsamples_procedures", "MTSamples Procedures", _CNG, "Recording Procedures", PUBLIC),
    _jury("mimic_rrs", "MIMIC-RRS", _CNG, "Documenting Diagnostic Reports", GATED),
    _jury("mimic_bhc", "MIMIC-IV-BHC", _CNG, "Documenting Patient Visits", GATED),
    _jury("chw_care_plan", "NoteExtract", _CNG, "Documenting Care Plans", PRIVATE),
    _jury("medication_qa", "MedicationQA", _PCE, "Providing Patient Education Resources", PUBLIC),
    _jury("starr_patient_instructions", "PatientInstruct", _PCE, "Delivering Personalized Care Instructions",
          PRIVATE),
    _jury("med_dialog", "MedDialog", _PCE, "Patient-Provider Messaging", PUBLIC),
    _em("shc_conf_med", "MedConfInfo", _PCE, "Patient-Provider Messaging", PRIVATE),
    _jury("medi_qa", "MEDIQA", _PCE, "Enhancing Patient Understanding and Accessibility in Health Communication",
          PUBLIC),
    _jury("mental_health", "MentalHealth", _PCE, "Facilitating Patient Engagement and Support", PRIVATE),
    _em("shc_proxy_med", "ProxySender", _PCE, "Patient-Provider Messaging", PRIVATE),
    _em("shc_privacy_med", "PrivacyDetection", _PCE, "Patient-Provider Messaging", PRIVATE),
    _em("pubmed_qa", "PubMedQA", _MRA, "Conducting Literature Research", PUBLIC),
    BenchmarkCard("ehr_sql", "EHRSQL", _MRA, "Analyzing Clinical Research Data",
                  PUBLIC, "ehr_sql_execution_accuracy"),
    _em("shc_bmt_med", "BMT-Status", _MRA, "Recording Research Processes", PRIVATE),
    _em("race_based_med", "RaceBias", _MRA, "Ensuring Clinical Research Quality", PUBLIC),
    _em("n2c2_ct_matching", "N2C2-CT Matching", _MRA, "Managing Research Enrollment", GATED),
    _em("medhallu", "MedHallu", _MRA, "Ensuring Clinical Research Quality", PUBLIC, beside=()),  # "0"/"1": HELM's EM
    _em("shc_gip_med", "HospiceReferral", _AW, "Scheduling Resources and Staff", PRIVATE),
    BenchmarkCard("mimiciv_billing_code", "MIMIC-IV Billing Code", _AW, "Overseeing Financial Activities",
                  GATED, "mimiciv_billing_code_f1"),
    _em("shc_sequoia_med", "ClinicReferral", _AW, "Organizing Workflow Processes", PRIVATE),
    _em("shc_cdi_med", "CDI-QA", _AW, "Care Coordination and Planning", PRIVATE),
    _em("shc_ent_med", "ENT-Referral", _AW, "Care Coordination and Planning", PRIVATE),
)

BY_NAME: Mapping[str, BenchmarkCard] = MappingProxyType({card.name: card for card in CARDS})
# every name HELM may use for a benchmark (its run-entry name and its aliases) -> the card
BY_HELM_NAME: Mapping[str, BenchmarkCard] = MappingProxyType(
    {alias: card for card in CARDS for alias in (card.name, *card.helm_aliases)})
