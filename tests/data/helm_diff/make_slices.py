"""Writes the differential's invented slices (README.md) in each upstream file's own format; run it to remake them:
    python tests/data/helm_diff/make_slices.py
Every question, note, dialogue and answer below was written for these tests: no real patient, exam or forum text.
Some items carry the quirks a published file may have (trailing spaces, a multi-line cell, a stray quote after an
option, an image question, an empty or n/a answer), so both sides read them as the real files would be read."""

from __future__ import annotations

import csv
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

MEDBULLETS = [  # (question, options A-E, answer letter)
    ("A 58-year-old man presents with 2 days of crushing substernal chest pain radiating to the left arm. ECG shows "
     "ST elevation in leads II, III and aVF. Which artery is most likely occluded?",
     ("Left anterior descending", "Left circumflex", "Right coronary", "Left main", "Posterior descending"), "C"),
    ("A 24-year-old woman has fatigue, cold intolerance and weight gain over 6 months. TSH is elevated and free T4 is "
     "low. Anti-thyroid peroxidase antibodies are positive. What is the most appropriate treatment?",
     ("Methimazole", "Levothyroxine", "Radioactive iodine", "Propranolol", "Thyroidectomy"), "B"),
    ("A 7-year-old boy has periorbital edema and cola-colored urine 2 weeks after a sore throat.\n"
     "Complement C3 is low. Which finding is most likely on renal biopsy?",
     ("Subepithelial humps", "Spike and dome basement membrane", "Effacement of podocytes only",
      "Crescents in most glomeruli", "Mesangial IgA deposits"), "A"),
    ("A 66-year-old woman on warfarin for atrial fibrillation has an INR of 9.2 without bleeding. What is the next "
     "best step? ",
     ("Give fresh frozen plasma", "Hold warfarin and give oral vitamin K", "Give prothrombin complex concentrate",
      "Continue warfarin at the same dose", "Start heparin"), "B"),
    ("A 31-year-old man has sudden severe headache, \"the worst of my life\", and neck stiffness. Non-contrast CT "
     "of the head is normal 8 hours after onset. What is the next step?",
     ("Discharge with analgesia", "MRI of the brain in 2 weeks", "Lumbar puncture", "Start sumatriptan",
      "EEG"), "C"),
    ("A 45-year-old woman has right upper quadrant pain after fatty meals, fever of 38.9 C and a positive Murphy "
     "sign. Ultrasound shows gallbladder wall thickening and pericholecystic fluid. What is the diagnosis?",
     ("Biliary colic", "Acute cholecystitis", "Choledocholithiasis", "Ascending cholangitis",
      "Acute pancreatitis"), "B"),
    ("A 70-year-old man has progressive memory loss over 3 years, getting lost in familiar places. Exam is "
     "otherwise normal. Which medication is first-line?",
     ("Donepezil", "Haloperidol", "Levodopa", "Lorazepam", "Memantine, as monotherapy in mild disease"), "A"),
    ("A 19-year-old college student has fever, headache and a petechial rash on the legs. Which is the most "
     "appropriate empiric therapy after blood cultures?",
     ("Oral amoxicillin", "Ceftriaxone and vancomycin", "Acyclovir alone", "Doxycycline", "Observation"), "B"),
    ("A 52-year-old man with alcohol use disorder is confused, has nystagmus and an ataxic gait. Which should be "
     "given before glucose?",
     ("Folate", "Thiamine", "Pyridoxine", "Cyanocobalamin", "Magnesium"), "B"),
    ("A 35-year-old woman at 34 weeks of gestation has blood pressure 168/112 mmHg, headache and proteinuria. Which "
     "medication prevents seizures in this condition?",
     ("Magnesium sulfate", "Phenytoin", "Labetalol", "Diazepam", "Nifedipine"), "A"),
]

MEDICATION_QA = [  # (question, focus, question type, answer)
    ("how long does it take for amoxicillin to start working for a sinus infection", "amoxicillin", "action",
     "Most people notice improvement within 2 to 3 days of starting the antibiotic. Finish the whole course even "
     "if you feel better."),
    ("can i take ibuprofen with lisinopril? ", "lisinopril", "interaction",
     "Occasional ibuprofen is usually tolerated, but regular use can raise blood pressure and affect the kidneys "
     "when combined with lisinopril. Ask your pharmacist about acetaminophen instead."),
    ("what is the usual dose of metformin", "metformin", "dose",
     "Adults usually start with 500 mg once or twice daily with meals; the dose is increased slowly to limit "
     "stomach upset, up to 2,000 mg a day."),
    ("does atorvastatin cause muscle pain", "atorvastatin", "side effects",
     "Muscle aches can occur with statins such as atorvastatin. Report unexplained muscle pain, tenderness or "
     "weakness, especially with fever or dark urine."),
    ("what foods should i avoid while taking warfarin", "warfarin", "diet",
     "Keep the amount of vitamin K foods, such as leafy green vegetables, steady from week to week rather than "
     "avoiding them. Limit alcohol and cranberry juice.\r\nTell your clinic before changing your diet."),
    ("is it safe to stop sertraline suddenly", "sertraline", "usage", ""),
    ("how should insulin pens be stored", "insulin", "storage",
     "Keep unopened pens in the refrigerator. A pen in use may be kept at room temperature for the number of days "
     "the label states; do not freeze it."),
    ("why take levothyroxine on an empty stomach", "levothyroxine", "usage",
     "Food, coffee, calcium and iron reduce how much levothyroxine is absorbed, so take it with water 30 to 60 "
     "minutes before breakfast."),
    ("what is prednisone used for", "prednisone", "indication", "n/a"),
    ("can omeprazole be taken long term", "omeprazole", "usage",
     " Long-term use is sometimes needed, but it may lower magnesium and vitamin B12 levels and is linked to bone "
     "fractures. Review the need for it with your doctor yearly."),
    ("what does hydrochlorothiazide do", "hydrochlorothiazide", "action",
     "It is a water pill (diuretic) that helps the kidneys remove salt and water, which lowers blood pressure."),
]

MED_DIALOG = {
    "healthcaremagic": [
        ("Patient: Hi doctor, I have had a dry cough for three weeks, worse at night, and a mild wheeze after "
         "climbing stairs. No fever. I am 34 and do not smoke. Doctor: Hello. A cough that worsens at night with "
         "wheeze suggests airway hyperreactivity such as cough-variant asthma. Spirometry with a bronchodilator "
         "test would help. Meanwhile avoid cold air and dust.",
         "What causes a persistent night-time dry cough with wheeze?"),
        ("Patient: My 5 year old son has had ear pain since yesterday and a temperature of 38.5. He is eating less. "
         "Doctor: Hi. Ear pain with fever in a child is commonly a middle ear infection. Give paracetamol for pain "
         "and have his ears examined; antibiotics are needed only in some cases.",
         "Could fever with ear pain in my son be an ear infection?"),
        ("Patient: I noticed a painless lump in my neck, about 1 cm, for two months. Doctor: Hello. Most small neck "
         "lumps are reactive lymph nodes, but one that persists beyond a few weeks should be examined and an "
         "ultrasound done.  ",
         "Should a painless neck lump present for two months be investigated?"),
        ("Patient: After starting a new blood pressure tablet my ankles are swollen in the evening.\nDoctor: Hi. "
         "Ankle swelling is a known effect of some calcium channel blockers such as amlodipine. Discuss a dose "
         "change or another class with your doctor.",
         "Can a blood pressure tablet cause ankle swelling?"),
        ("Patient: I get a burning feeling in my chest after meals and when lying down. Antacids help a bit. "
         "Doctor: Hello. These are typical reflux symptoms. Eat smaller meals, avoid late dinners, raise the head "
         "of the bed, and a short course of a proton pump inhibitor may help.",
         "What can be done for burning chest pain after meals?"),
        ("Patient: My periods have been irregular for a year and I have gained weight and have acne. Doctor: Hi. "
         "Irregular cycles with acne and weight gain may point to polycystic ovary syndrome. Hormone tests and a "
         "pelvic ultrasound are advised.",
         "Are irregular periods with acne and weight gain a sign of PCOS?"),
        ("Patient: I twisted my ankle playing football, it is swollen and I can walk with pain. Doctor: Hello. "
         "Rest, ice, compression and elevation are advised. If you cannot bear weight or the bone is tender, an "
         "X-ray is needed.",
         "How should a swollen ankle after a football injury be managed?"),
        ("Patient: I have tingling in both feet for months. I have diabetes for ten years. Doctor: Hi. This is "
         "likely diabetic peripheral neuropathy. Good sugar control, foot care and checking vitamin B12 are "
         "important.",
         "Is tingling in both feet related to long-standing diabetes?"),
    ],
    "icliniq": [
        ("Patient: Hello doctor, my mother is 62 and her fasting sugar is 132 mg/dL on two tests. Is this diabetes? "
         "Doctor: Hi. Two fasting values above 126 mg/dL confirm diabetes. An HbA1c test and a diet plan are the "
         "next steps.",
         "My mother's fasting sugar is high. Is it diabetes?"),
        ("Patient: Hi doctor, I have red itchy patches on my elbows with silvery scales. Doctor: Hi. The "
         "description fits plaque psoriasis. Moisturisers and a topical steroid are first-line; please avoid "
         "scratching.",
         "I have itchy scaly patches on my elbows. What is it?"),
        ("Patient: Hello doctor, I feel my heart racing for a few minutes at a time, then it stops suddenly. "
         "Doctor: Hi. Episodes that start and stop abruptly suggest a supraventricular tachycardia. A Holter "
         "monitor can capture an episode.",
         "Why does my heart race and stop suddenly?"),
        ("Patient: My child swallowed a small button battery an hour ago. Doctor: Hi. This is an emergency. Go to "
         "the nearest emergency department now for an X-ray; the battery may need urgent removal.",
         "My child swallowed a button battery. What should I do?"),
        ("Patient: Hello doctor, I have white patches in my mouth after using an asthma inhaler. Doctor: Hi. "
         "Inhaled steroids can cause oral thrush. Rinse your mouth after each use and an antifungal gel will "
         "clear it.",
         "Why do I have white patches in my mouth after using an inhaler?"),
        ("Patient: Hi, I have pain in my lower back going down my left leg to the foot. Doctor: Hello. Pain "
         "radiating below the knee suggests sciatica from a disc bulge. Stay active, take analgesics and see a "
         "physiotherapist. \n",
         "I have back pain going down my leg. What can it be?"),
        ("Patient: Hello doctor, my eyes are dry and gritty after long hours on the computer. Doctor: Hi. Screen "
         "use reduces blinking. Follow the 20-20-20 rule and use lubricating eye drops.",
         "My eyes feel dry after working on the computer. What should I do?"),
        ("Patient: Hi doctor, I have had loose stools for four days after a trip. No blood. Doctor: Hi. This is "
         "likely travellers' diarrhoea. Drink oral rehydration solution; see a doctor if there is blood or high "
         "fever.",
         "I have had diarrhoea for four days after travelling. Is it serious?"),
    ],
}

HEAD_QA = [  # (category, question, options, right answer id 1-based, has an image)
    ("medicine", "Which electrolyte disturbance is most typical of the syndrome of inappropriate antidiuretic "
                 "hormone secretion?", ("Hyperkalemia.", "Hyponatremia.", "Hypercalcemia.", "Hypernatremia."), 2, False),
    ("nursing", "The recommended position for a patient with dyspnea due to heart failure is:",
     ("Trendelenburg.", "Prone.", "Fowler or semi-Fowler.", "Left lateral decubitus."), 3, False),
    ("pharmacology", "Which drug is an inhibitor of the angiotensin-converting enzyme?",
     ("Losartan.", "Enalapril.", "Spironolactone.", "Amlodipine."), 2, False),
    ("biology", "The organelle where oxidative phosphorylation takes place is:",
     ("The nucleus.", "The Golgi apparatus.", "The lysosome.", "The mitochondrion."), 4, False),
    ("medicine", "In the image shown, the most likely diagnosis is:",
     ("Pneumothorax.", "Pleural effusion.", "Lobar pneumonia.", "Normal chest."), 1, True),
    ("psychology", "The defense mechanism by which unacceptable impulses are attributed to others is:",
     ("Sublimation.", "Projection.", "Regression.", "Denial."), 2, False),
    ("chemistry", "The pH of a 0.01 M solution of hydrochloric acid at 25 degrees is:",
     ("1.", "2.", "7.", "12.", "14."), 2, False),
    ("medicine", "Which of the following is a criterion for sepsis-associated organ dysfunction? ",
     ("A SOFA score increase of 2 points or more.", "Temperature above 37.5 degrees.", "Leukocytes above 10,000.",
      "Heart rate above 80 per minute."), 1, False),
    ("nursing", "The first action on finding an adult unresponsive and not breathing normally is:",
     ("Give two rescue breaths.", "Check the pupils.", "Call for help and start chest compressions.",
      "Place the patient in the recovery position."), 3, False),
    ("pharmacology", "Which antidote is used in paracetamol poisoning?",
     ("Naloxone.", "Flumazenil.", "N-acetylcysteine.", "Atropine."), 3, False),
]

MED_QA = [  # (question, options A-D as written in the file, answer letter)
    ("A 29-year-old woman presents with palpitations, heat intolerance and a diffuse non-tender goiter. Her TSH is "
     "suppressed. Which antibody is most likely present?",
     ("Anti-TSH receptor stimulating antibodies", "Anti-mitochondrial antibodies", "Anti-centromere antibodies",
      "Anti-smooth muscle antibodies"), "A"),
    ("A 63-year-old man has painless jaundice, weight loss and a palpable non-tender gallbladder. Which is the most "
     "likely diagnosis?",
     ("Choledocholithiasis", "Pancreatic head adenocarcinoma", "Hepatitis A", "Primary biliary cholangitis\""),
     "B"),
    ("A 4-year-old boy has a barking cough and inspiratory stridor that is worse at night. Which virus is the "
     "most common cause?",
     ("Respiratory syncytial virus", "Rhinovirus", "Parainfluenza virus\"\n", "Adenovirus"), "C"),
    ("A 40-year-old woman has episodic headaches, sweating and palpitations with blood pressure of 210/120 mmHg. "
     "Which test is most appropriate first?",
     ("Plasma free metanephrines", "Serum cortisol", "Renin activity\n\"", "Thyroid ultrasound"), "A"),
    ("A 55-year-old smoker has hyponatremia and a central lung mass. Which tumor type is most likely?",
     ("Adenocarcinoma", "Small cell carcinoma", "Large cell carcinoma", "Carcinoid tumor"), "B"),
    ("A 22-year-old man has urethritis, conjunctivitis and knee arthritis 3 weeks after a diarrheal illness. Which "
     "HLA type is associated?",
     ("HLA-DR3", "HLA-DR4", "HLA-B27", "HLA-B51"), "C"),
    ("A 70-year-old woman has a resting tremor, bradykinesia and rigidity. Which neurotransmitter is deficient?",
     ("Acetylcholine", "Serotonin", "GABA", "Dopamine "), "D"),
    ("A newborn has bilious vomiting in the first day of life and a double bubble sign on X-ray. Which condition is "
     "associated?",
     ("Down syndrome", "Turner syndrome", "Marfan syndrome", "Fragile X syndrome"), "A"),
    ("A 34-year-old woman has fatigue and a hemoglobin of 9 g/dL with microcytosis and low ferritin. What is the "
     "most likely cause in a menstruating woman?",
     ("Vitamin B12 deficiency", "Iron deficiency from menstrual loss", "Thalassemia minor", "Anemia of chronic "
     "disease"), "B"),
    ("A 48-year-old man has sudden pain, redness and swelling of the first metatarsophalangeal joint after a large "
     "meal with alcohol. Which crystals are expected on aspiration?",
     ("Calcium pyrophosphate", "Monosodium urate", "Cholesterol", "Calcium oxalate"), "B"),
]

MED_MCQA = [  # (question, options a-d, correct 1-4, subject, topic)
    ("Drug of choice for absence seizures in a child is:", ("Phenytoin", "Ethosuximide", "Carbamazepine",
                                                             "Phenobarbitone"), 2, "Pharmacology", "CNS"),
    ("Most common site of carcinoid tumor in the gastrointestinal tract is:", ("Stomach", "Appendix",
                                                                               "Rectum", "Small intestine"),
     4, "Pathology", "GIT"),
    ("Which nerve is injured in fracture of the surgical neck of humerus?", ("Radial", "Ulnar", "Axillary",
                                                                              "Median"), 3, "Anatomy", "Upper limb"),
    ("Koplik spots are seen in:", ("Measles", "Mumps", "Rubella", "Chickenpox"), 1, "Microbiology", "Virology"),
    ("Normal intraocular pressure is:", ("5-8 mm Hg", "10-21 mm Hg", "25-30 mm Hg", "30-40 mm Hg"), 2,
     "Ophthalmology", "Glaucoma"),
    ("Vitamin deficiency causing night blindness is: ", ("Vitamin A", "Vitamin B1", "Vitamin C", "Vitamin D"), 1,
     "Social & Preventive Medicine", "Nutrition"),
    ("The hormone that triggers ovulation is:", ("FSH", "Estrogen", "LH", "Progesterone"), 3, "Physiology",
     "Reproduction"),
    ("Antidote for heparin overdose is:", ("Vitamin K", "Protamine sulphate", "Desferrioxamine",
                                           "Fresh frozen plasma"), 2, "Pharmacology", "Blood"),
    ("Commonest cause of intestinal obstruction in adults in India is:", ("Adhesions", "Hernia", "Volvulus",
                                                                          "Tuberculosis"), 1, "Surgery", "GIT"),
    ("Positive Nikolsky sign is seen in:", ("Bullous pemphigoid", "Pemphigus vulgaris",
                                            "Dermatitis herpetiformis", "Psoriasis"), 2, "Dermatology",
     "Bullous disorders"),
]


def write_medbullets(folder: Path) -> None:
    fields = ["question", "answer", "opa", "opb", "opc", "opd", "ope", "answer_idx", "explanation", "link"]
    with open(folder / "medbullets_op5.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for n, (question, options, letter) in enumerate(MEDBULLETS):
            writer.writerow({"question": question, "answer": options["ABCDE".index(letter)],
                             **dict(zip(fields[2:7], options)), "answer_idx": letter,
                             "explanation": f"Invented explanation {n}.", "link": f"https://example.org/q{n}"})


def write_medication_qa(folder: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    sheet.append(["Question", "Focus (Drug)", "Question Type", "Answer", "Section Title", "URL"])
    for question, focus, kind, answer in MEDICATION_QA:
        sheet.append([question, focus, kind, answer or None, "Invented", "https://example.org/drug"])
    book.save(folder / "MedInfo2019-QA-Medications.xlsx")


def write_med_dialog(folder: Path) -> None:
    for subset, pairs in MED_DIALOG.items():
        (folder / subset).mkdir(exist_ok=True)
        data = [{"src": src, "tgt": tgt} for src, tgt in pairs]
        (folder / subset / "test.json").write_text(json.dumps({"data": data}, indent=2, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")


def write_head_qa(folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("name", pa.string()), ("year", pa.string()), ("category", pa.string()),
                        ("qid", pa.int32()), ("qtext", pa.string()), ("ra", pa.int32()),
                        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("answers", pa.list_(pa.struct([("aid", pa.int32()), ("atext", pa.string())])))])
    rows = [{"name": f"Invented_{category}", "year": "2016", "category": category, "qid": n + 1, "qtext": question,
             "ra": right, "image": {"bytes": b"\x89PNG invented", "path": None} if image else None,
             "answers": [{"aid": i + 1, "atext": text} for i, text in enumerate(options)]}
            for n, (category, question, options, right, image) in enumerate(HEAD_QA)]
    (folder / "en" / "test").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "en" / "test" / "0000.parquet")


def write_med_qa(folder: Path) -> None:
    with open(folder / "phrases_no_exclude_test.jsonl", "w", encoding="utf-8") as fh:
        for question, options, letter in MED_QA:
            fh.write(json.dumps({"question": question, "answer": options["ABCD".index(letter)].rstrip('"\n '),
                                 "options": dict(zip("ABCD", options)), "meta_info": "step1",
                                 "answer_idx": letter, "metamap_phrases": []}) + "\n")


def write_med_mcqa(folder: Path) -> None:
    with open(folder / "dev.json", "w", encoding="utf-8") as fh:
        for n, (question, options, cop, subject, topic) in enumerate(MED_MCQA):
            fh.write(json.dumps({"question": question, "exp": "Invented explanation.", "cop": cop,
                                 **dict(zip(("opa", "opb", "opc", "opd"), options)), "subject_name": subject,
                                 "topic_name": topic, "id": f"invented-{n:04d}", "choice_type": "single"}) + "\n")


def main() -> None:
    for name, write in (("medbullets", write_medbullets), ("medication_qa", write_medication_qa),
                        ("med_dialog", write_med_dialog), ("head_qa", write_head_qa),
                        ("medhelm_med_qa", write_med_qa), ("medhelm_med_mcqa", write_med_mcqa)):
        folder = HERE / name
        folder.mkdir(exist_ok=True)
        write(folder)


if __name__ == "__main__":
    main()
