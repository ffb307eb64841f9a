"""The clinician-validated MedHELM taxonomy: 5 categories, 22 subcategories (data, not code)."""

from __future__ import annotations

TAXONOMY: dict[str, tuple[str, ...]] = {
    "Clinical Decision Support": (
        "Supporting Diagnostic Decisions",
        "Planning Treatments",
        "Predicting Patient Risks and Outcomes",
        "Providing Clinical Knowledge Support",
    ),
    "Clinical Note Generation": (
        "Documenting Patient Visits",
        "Recording Procedures",
        "Documenting Diagnostic Reports",
        "Documenting Care Plans",
    ),
    "Patient Communication and Education": (
        "Providing Patient Education Resources",
        "Delivering Personalized Care Instructions",
        "Patient-Provider Messaging",
        "Enhancing Patient Understanding and Accessibility in Health Communication",
        "Facilitating Patient Engagement and Support",
    ),
    "Medical Research Assistance": (
        "Conducting Literature Research",
        "Analyzing Clinical Research Data",
        "Recording Research Processes",
        "Ensuring Clinical Research Quality",
        "Managing Research Enrollment",
    ),
    "Administration and Workflow": (
        "Scheduling Resources and Staff",
        "Overseeing Financial Activities",
        "Organizing Workflow Processes",
        "Care Coordination and Planning",
    ),
}

CATEGORIES: tuple[str, ...] = tuple(TAXONOMY)
SUBCATEGORIES: tuple[str, ...] = tuple(s for subs in TAXONOMY.values() for s in subs)
CATEGORY_OF: dict[str, str] = {s: c for c, subs in TAXONOMY.items() for s in subs}


def check(category: str, subcategory: str) -> None:
    """Raise ValueError unless (category, subcategory) is in the taxonomy (or both empty)."""
    if not category and not subcategory:
        return
    if category not in TAXONOMY:
        raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    if subcategory and subcategory not in TAXONOMY[category]:
        raise ValueError(f"subcategory {subcategory!r} is not in category {category!r}")
