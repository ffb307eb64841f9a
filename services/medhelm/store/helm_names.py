"""Upstream MedHELM's 37 leaf benchmarks as HELM names them, for ``import-helm`` (data, not code).

HELM's run names start with the run-entry name (``pubmed_qa:model=...``); its ``stats.json`` main stat is
the schema's ``main_name`` (jury benchmarks: ``<name>_accuracy``, a 1-5 mean judge score, normalised here
to 0-1 so it sits beside our ``jury_score_normalized``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HelmBenchmark:
    name: str  # our benchmark name (= upstream run-entry name)
    display_name: str
    category: str
    subcategory: str
    access: str
    main_stat: str  # the stat HELM's leaderboard column shows
    jury: bool = False  # main stat is a 1-5 jury mean
    main_split: str = "test"
    aliases: tuple[str, ...] = ()  # other names HELM uses for the group / run entry


_CDS, _CNG, _PCE, _MRA, _AW = ("Clinical Decision Support", "Clinical Note Generation",
                               "Patient Communication and Education", "Medical Research Assistance",
                               "Administration and Workflow")


def _jury(name: str, display: str, cat: str, sub: str, access: str) -> HelmBenchmark:
    return HelmBenchmark(name, display, cat, sub, access, f"{name}_accuracy", jury=True)


def _em(name: str, display: str, cat: str, sub: str, access: str, **kw: object) -> HelmBenchmark:
    return HelmBenchmark(name, display, cat, sub, access, "exact_match", **kw)  # type: ignore[arg-type]


HELM_BENCHMARKS: tuple[HelmBenchmark, ...] = (
    HelmBenchmark("medcalc_bench", "MedCalc-Bench", _CDS, "Supporting Diagnostic Decisions", "public",
                  "medcalc_bench_accuracy"),
    _em("clear", "CLEAR", _CDS, "Supporting Diagnostic Decisions", "private"),
    _jury("mtsamples_replicate", "MTSamples", _CDS, "Planning Treatments", "public"),
    HelmBenchmark("medec", "Medec", _CDS, "Planning Treatments", "public", "medec_error_flag_accuracy"),
    _em("ehrshot", "EHRSHOT", _CDS, "Predicting Patient Risks and Outcomes", "gated"),
    _em("head_qa", "HeadQA", _CDS, "Providing Clinical Knowledge Support", "public"),
    _em("medbullets", "Medbullets", _CDS, "Providing Clinical Knowledge Support", "public"),
    _em("medhelm_med_qa", "MedQA", _CDS, "Providing Clinical Knowledge Support", "public", aliases=("med_qa",)),
    _em("medhelm_med_mcqa", "MedMCQA", _CDS, "Providing Clinical Knowledge Support", "public",
        main_split="valid", aliases=("med_mcqa",)),
    _jury("medalign", "MedAlign", _CDS, "Providing Clinical Knowledge Support", "gated"),
    _em("shc_ptbm_med", "ADHD-Behavior", _CDS, "Providing Clinical Knowledge Support", "private"),
    _em("shc_sei_med", "ADHD-MedEffects", _CDS, "Providing Clinical Knowledge Support", "private"),
    _jury("dischargeme", "DischargeMe", _CNG, "Documenting Patient Visits", "gated"),
    _jury("aci_bench", "ACI-Bench", _CNG, "Documenting Patient Visits", "public"),
    _jury("mtsamples_procedures", "MTSamples Procedures", _CNG, "Recording Procedures", "public"),
    _jury("mimic_rrs", "MIMIC-RRS", _CNG, "Documenting Diagnostic Reports", "gated"),
    _jury("mimic_bhc", "MIMIC-IV-BHC", _CNG, "Documenting Patient Visits", "gated"),
    _jury("chw_care_plan", "NoteExtract", _CNG, "Documenting Care Plans", "private"),
    _jury("medication_qa", "MedicationQA", _PCE, "Providing Patient Education Resources", "public"),
    _jury("starr_patient_instructions", "PatientInstruct", _PCE, "Delivering Personalized Care Instructions",
          "private"),
    _jury("med_dialog", "MedDialog", _PCE, "Patient-Provider Messaging", "public"),
    _em("shc_conf_med", "MedConfInfo", _PCE, "Patient-Provider Messaging", "private"),
    _jury("medi_qa", "MEDIQA", _PCE, "Enhancing Patient Understanding and Accessibility in Health Communication",
          "public"),
    _jury("mental_health", "MentalHealth", _PCE, "Facilitating Patient Engagement and Support", "private"),
    _em("shc_proxy_med", "ProxySender", _PCE, "Patient-Provider Messaging", "private"),
    _em("shc_privacy_med", "PrivacyDetection", _PCE, "Patient-Provider Messaging", "private"),
    _em("pubmed_qa", "PubMedQA", _MRA, "Conducting Literature Research", "public"),
    HelmBenchmark("ehr_sql", "EHRSQL", _MRA, "Analyzing Clinical Research Data", "public",
                  "ehr_sql_execution_accuracy"),
    _em("shc_bmt_med", "BMT-Status", _MRA, "Recording Research Processes", "private"),
    _em("race_based_med", "RaceBias", _MRA, "Ensuring Clinical Research Quality", "public"),
    _em("n2c2_ct_matching", "N2C2-CT Matching", _MRA, "Managing Research Enrollment", "gated"),
    _em("medhallu", "MedHallu", _MRA, "Ensuring Clinical Research Quality", "public"),
    _em("shc_gip_med", "HospiceReferral", _AW, "Scheduling Resources and Staff", "private"),
    HelmBenchmark("mimiciv_billing_code", "MIMIC-IV Billing Code", _AW, "Overseeing Financial Activities", "gated",
                  "mimiciv_billing_code_f1"),
    _em("shc_sequoia_med", "ClinicReferral", _AW, "Organizing Workflow Processes", "private"),
    _em("shc_cdi_med", "CDI-QA", _AW, "Care Coordination and Planning", "private"),
    _em("shc_ent_med", "ENT-Referral", _AW, "Care Coordination and Planning", "private"),
)

BY_NAME: dict[str, HelmBenchmark] = {alias: b for b in HELM_BENCHMARKS for alias in (b.name, *b.aliases)}
