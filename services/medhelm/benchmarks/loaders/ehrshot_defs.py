"""EHRSHOT task wording, as upstream MedHELM asks it (LUMIA-style prompts, ``ehrshot_scenario.py``): the
question per task, the specialist persona, and — for the ``new_*`` diagnosis tasks only, as upstream's
config — the short clinical definition and the medical-code definition. Data only; a missing package data
file (a broken install) raises FileNotFoundError.
"""

from __future__ import annotations

import json
from pathlib import Path

# task -> (full name, persona (upstream's first listed specialist), question)
TASKS = {
    "guo_icu": ("ICU Transfer", "Intensivist",
                "If this patient is admitted to the hospital right now, is the patient likely to be transferred to the "
                "ICU at any point during their admission?"),
    "guo_los": ("Length of Stay", "Hospitalist",
                "If this patient is admitted to the hospital right now, is the patient likely to have a length of "
                "stay of at least 7 days (i.e. a week)?"),
    "guo_readmission": ("30-Day Readmission", "Hospitalist",
                        "If this patient is discharged from the hospital right now, is the patient likely to be "
                        "readmitted to the hospital within 30 days?"),
    "lab_anemia": ("Anemia", "Hematologist",
                   "If a lab test for Anemia is ordered for this patient right now, will it come back abnormal? "
                   "(i.e. <120 g/L)"),
    "lab_hyperkalemia": ("Hyperkalemia", "Nephrologist",
                         "If a lab test for Hyperkalemia is ordered for this patient right now, will it come back "
                         "abnormal (i.e. >5.5 mmol/L)?"),
    "lab_hypoglycemia": ("Hypoglycemia", "Endocrinologist",
                         "If a lab test for Hypoglycemia is ordered for this patient right now, will it come back "
                         "abnormal (i.e. <3.9 mmol/L)?"),
    "lab_hyponatremia": ("Hyponatremia", "Nephrologist",
                         "If a lab test for Hyponatremia is ordered for this patient right now, will it come back "
                         "abnormal (i.e. <135 mmol/L)?"),
    "lab_thrombocytopenia": ("Thrombocytopenia", "Hematologist",
                             "If a lab test for Thrombocytopenia is ordered for this patient right now, will it come "
                             "back abnormal? (i.e. <150 109/L)"),
    "new_acutemi": ("Acute Myocardial Infarction", "Cardiologist",
                    "Is this patient likely to receive a first-time diagnosis of Acute Myocardial Infarction within "
                    "the next year?"),
    "new_celiac": ("Celiac Disease", "Gastroenterologist",
                   "Is this patient likely to receive a first-time diagnosis of Celiac Disease within the next year?"),
    "new_hyperlipidemia": ("Hyperlipidemia", "Cardiologist",
                           "Is this patient likely to receive a first-time diagnosis of Hyperlipidemia within the next "
                           "year?"),
    "new_hypertension": ("Hypertension", "Primary Care Physician",
                         "Is this patient likely to receive a first-time diagnosis of Hypertension within the next "
                         "year?"),
    "new_lupus": ("Systemic Lupus Erythematosus", "Rheumatologist",
                  "Is this patient likely to receive a first-time diagnosis of Systemic Lupus Erythematosus within "
                  "the next year?"),
    "new_pancan": ("Pancreatic Cancer", "Oncologist",
                   "Is this patient likely to receive a first-time diagnosis of Pancreatic Cancer within the next "
                   "year?"),
}

# Short, diagnosis-focused clinical definitions of the new_* conditions (upstream's CLINICAL_SHORT_DEFS).
CLINICAL_DEFINITIONS = {
    "new_acutemi": "A myocardial infarction (MI), commonly known as a heart attack, occurs when blood flow to the "
                   "heart muscle is blocked, leading to tissue death. Key symptoms include chest pain radiating to "
                   "the left shoulder, arm, or jaw, shortness of breath, nausea, and cold sweats. Atypical "
                   "presentations, especially in women and the elderly, include neck pain, fatigue, and minimal "
                   "symptoms. Major risk factors are coronary artery disease, high blood pressure, smoking, "
                   "diabetes, and obesity. Diagnosis involves ECGs and blood tests for troponin levels. Immediate "
                   "treatment aims to restore blood flow via percutaneous coronary intervention (PCI) or "
                   "thrombolysis. Long-term management includes lifestyle changes and medications like aspirin and "
                   "statins.",
    "new_celiac": "Celiac disease is a chronic autoimmune disorder primarily affecting the small intestine, "
                  "triggered by an intolerance to gluten (proteins found in wheat, rye, and barley). Symptoms range "
                  "from gastrointestinal issues like chronic diarrhea and malabsorption to non-gastrointestinal "
                  "symptoms or even no symptoms. It is linked with other autoimmune diseases such as Type 1 "
                  "diabetes and Hashimoto's thyroiditis. Diagnosis involves blood antibody tests, intestinal "
                  "biopsies, and genetic testing. The only effective treatment is a strict lifelong gluten-free "
                  "diet, which mitigates symptoms and reduces complications.",
    "new_hyperlipidemia": "Hyperlipidemia is characterized by abnormally high levels of lipids or lipoproteins in "
                          "the blood, including fats, triglycerides, cholesterol, and phospholipids. It can result "
                          "from genetic factors (primary hyperlipidemia) or underlying conditions like diabetes "
                          "(secondary hyperlipidemia). This condition is a modifiable risk factor for "
                          "cardiovascular disease and may also predispose individuals to acute pancreatitis. "
                          "Diagnosis requires laboratory tests to measure lipid levels, and management often "
                          "involves chronic medication to control these levels.",
    "new_hypertension": "Hypertension, or high blood pressure, is a chronic medical condition characterized by "
                        "persistently elevated blood pressure in the arteries, with a resting measurement at or "
                        "above 130/80 mmHg. It is a significant risk factor for numerous cardiovascular and "
                        "systemic diseases, including stroke, coronary artery disease, heart failure, atrial "
                        "fibrillation, and chronic kidney disease. Hypertension is divided into primary (essential) "
                        "hypertension, accounting for 90-95% of cases, which is due to nonspecific lifestyle and "
                        "genetic factors, and secondary hypertension, due to identifiable causes like chronic kidney "
                        "disease and endocrine disorders. Identifying hypertension in a patient's EHR involves "
                        "reviewing blood pressure readings, assessing for risk factors such as obesity, high salt "
                        "intake, and smoking, and noting any related health conditions or medications.",
    "new_lupus": "Systemic lupus erythematosus (SLE) is an autoimmune disease where the body's immune system "
                 "mistakenly attacks healthy tissues, causing inflammation and damage in various organs. Common "
                 "symptoms include joint pain and swelling, fever, chest pain, hair loss, mouth ulcers, swollen "
                 "lymph nodes, fatigue, and a distinctive facial rash. Diagnosis involves a combination of clinical "
                 "symptoms and laboratory tests, particularly the presence of anti-nuclear antibodies. Risk factors "
                 "include genetic predisposition, female sex hormones, sunlight exposure, smoking, vitamin D "
                 "deficiency, and certain infections. There is no cure, but treatments such as NSAIDs, "
                 "corticosteroids, immunosuppressants, hydroxychloroquine, and methotrexate can manage symptoms. "
                 "SLE significantly increases the risk of cardiovascular disease and can complicate pregnancies.",
    "new_pancan": "Pancreatic cancer, primarily pancreatic adenocarcinoma, arises from the pancreas and often goes "
                  "undetected until advanced stages. Key diagnostic indicators include abdominal pain, jaundice, "
                  "weight loss, and a history of smoking, obesity, diabetes, or certain genetic conditions. "
                  "Screening relies on imaging, blood tests, and biopsies, with risk factors including smoking (25% "
                  "of cases) and genetic predispositions (5-10%). Early diagnosis is rare, with over half of cases "
                  "occurring in individuals over 70. Neuroendocrine tumors, though less common and aggressive, also "
                  "originate in the pancreas. Treatment options vary by stage and include surgery, radiotherapy, "
                  "and chemotherapy, but the prognosis remains poor, particularly for late-stage adenocarcinoma.",
}



def code_definitions() -> dict[str, list[str]]:
    """The ontology codes that denote each new_* condition in the record (upstream's CODE_DEFS: an OMOP Athena
    concept and its descendants), shipped as package data."""
    path = Path(__file__).resolve().parents[1] / "data" / "ehrshot_code_definitions.json"
    return {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if not k.startswith("_")}


def task_instruction(task: str) -> str:
    """Persona, (definitions), and the question: what upstream puts under "# Instructions"."""
    name, persona, question = TASKS[task]
    parts = [f"You are an expert {persona.lower()} at Stanford Healthcare, an academic medical center affiliated "
             f"with Stanford University. You specialize in predicting {name.lower()}."]
    if task in CLINICAL_DEFINITIONS:
        parts.append("Clinical Definition: " + CLINICAL_DEFINITIONS[task])
    codes = code_definitions().get(task) if task.startswith("new_") else None
    if codes:
        parts.append(f"Medical Code Definition: In an electronic health record (EHR), {name.lower()} is denoted by "
                     "the occurrence of any of the following medical codes: " + ", ".join(sorted(codes)))
    parts.append("Instruction: Review the patient's EHR history. Based on all available medical evidence in the "
                 f"provided EHR, please answer the question: {question}")
    return "\n\n".join(parts)
