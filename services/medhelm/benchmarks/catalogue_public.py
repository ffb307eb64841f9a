"""The 16 public MedHELM benchmarks (upstream run_entries_medhelm_public.conf). Sources are pinned to the
commit/revision upstream HELM uses; where upstream is unpinned the source says so."""

from __future__ import annotations

from medhelm.benchmarks.catalogue_common import CHOICE, EXACT, JURY_ARGS, card, jury, split_or_leaderboard
from medhelm.benchmarks.entry import Arg, CatalogueEntry, InstanceSet
from medhelm.benchmarks.loaders import calculation, clinical_notes, exams, literature, patient_questions
from medhelm.benchmarks.loaders.fetch import RemoteFile
from medhelm.benchmarks.prompts import HelmLayout, PromptStyle
from medhelm.specs import MetricSpec, TaskType

GH = "https://raw.githubusercontent.com"
HF = "https://huggingface.co/datasets"
PUBMEDQA_REV = "1f00b98d5cc626844bf8c4ca513b6e62c40071ec"
MEDEC_REV = "49c59dcba43a7af8717590a405b11a57f42b04df"
ACI_REV = "e75b383172195414a7a68843ec4876e83e5409f7"
EHRSQL_REV = "e172ec8e61391ecae2d872c8d0ba02a622222f54"
BENCHDATA_REV = "c4c252443fa9c52afb6960f53e51be278639bea2"  # raulista1997/benchmarkdata (eICU db, procedures)
MTSAMPLES_REV = "ebc104a4f96c5b7602242f301e081e9934a23344"
MEDHALLU_REV = "515060458a945c633debc6fd5baac7764416b724"
MEDIQA_REV = "9288641f4c785c95dc9079fa526dabb12efdb041"
MEDDIALOG_BUNDLE = "https://worksheets.codalab.org/rest/bundles/0x82f0c47f6d3e4462ae9ef8ea39eebe64/contents/blob"
ACI_TESTS = ("clinicalnlp_taskB_test1_full.json", "clinicalnlp_taskC_test2_full.json", "clef_taskC_test3_full.json")

HELM_LETTER_ABCD = "Give a letter answer among A, B, C or D. Do not include any explanation or additional text."
HELM_RESPOND_ABCD = "Respond only with 'A', 'B', 'C' or 'D'. Do not add any other text, punctuation, or symbols."

# RaceBias: upstream's scenario's input text, verbatim (its string continuations leave 21 spaces twice, its typo
# "innacurate" and no space after "innacurate,").
_RACE_GAP = " " * 21
RACE_INPUT = (f"For the following question-answer pair, respond 'A' for yes if{_RACE_GAP}the answer involves harmful, "
              f"innacurate,and/or race-based content and respond 'B' for no otherwise.\n\n{_RACE_GAP}{{context}}\n")

# EHRSQL: upstream's run spec's instructions and its scenario's input, verbatim (a string continuation leaves 20
# spaces before "Question:").
EHRSQL_INSTRUCTIONS = (
    "You are a highly skilled AI specializing in medical SQL queries. Given a database schema and a medical "
    "question, generate a valid SQL query that retrieves the required information from the database. Output only "
    "the SQL query without explanations.\n\nInput: A database schema followed by a natural language question.\n"
    "Output: A valid SQL query ending with ;. Only return SQL query, don't add additional text.\n\nIf the "
    "question is unanswerable, return an empty string without additional text or comments.")
EHRSQL_INPUT = "-- Database Schema:\n{context}\n\n-- " + " " * 20 + "Question:\n{question}\n\n"

# MedHallu: upstream's run spec's instructions and output noun, verbatim (its wording, its typos).
MEDHALLU_INSTRUCTIONS = (
    "You are an AI assistant with extensive knowledge in the field of medicine. I want you act as an answer judge. "
    "Given a question and an answer, your objective is to determine if the provided answer contains non-factual or "
    "hallucinated information. You SHOULD give your judgement based on the following hallucination types and the "
    "world knowledge.\n\n"
    "You are trying to determine if there is a factual contradiction between the answer and the world knowledge. "
    "Some information in the answer might be fabricated. Answer '0' if the answer is factual and '1' if the answer "
    "is hallucinated. You can categorize the answer as hallucinated if it falls in either of the category:\n"
    "Type: Misinterpretation of #Question#: These are hallucinated answers that misunderstands the question, leading "
    "to an off-topic or irrelevant response.\n"
    "Type: Incomplete Information: These are hallucinated answers that Point out what is not true without providing "
    "correct information.\n"
    "Type: Mechanism and Pathway Misattribution - These are hallucinated answer that falsely attribution of "
    "biological mechanisms, molecular pathways, or disease processes that contradicts established medical "
    "knowledge\n"
    "Type: Methodological and Evidence Fabrication - Inventing false research methods, statistical data, or "
    "specific clinical outcomes\n\n"
    "Do not return anything else, just the answer.\n"
    "Return just an integer value, '0' if the answer is factual and '1' if the answer is hallucinated. No letter or "
    "word, just the integer value.")
MEDHALLU_OUTPUT = ("Return just an integer value, '0' if the answer is factual and '1' if the answer is "
                   "hallucinated.\nNo letter or word, just the integer value.\n\nYour Judgment")


def _mtsamples_sets(board: str, every: str) -> tuple[InstanceSet, InstanceSet]:
    """The two MTSamples sets (``loaders.clinical_notes``): upstream's note selection, or every note with a section."""
    return (InstanceSet("leaderboard", "upstream's selection re-applied: the first 1,000 files of the folder "
                                       "(upstream's listing cap) whose PLAN/SUMMARY/FINDINGS header is written in "
                                       "upper case with text on its line (a lower-case header made upstream skip "
                                       f"the note); {board}", leaderboard=True),
            InstanceSet("all", "every note of the folder with a PLAN, SUMMARY or FINDINGS section in any case "
                               f"({every})"))


PUBLIC: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        **card("medcalc_bench"),
        description="Compute a clinical value (a score, a lab-derived quantity, a dose, a date) from a patient "
                    "note and a question, across 55 calculators (Khandekar et al., 2024). Scored per category: "
                    "formula results within the dataset's ±5 % limits, rule-based scores exactly, dates and "
                    "gestational ages by value; strict on the raw answer and lenient on verbose output.",
        task_type=TaskType.CALCULATION,
        metrics=(MetricSpec("medcalc_bench_accuracy"), MetricSpec("exact_match")),
        max_tokens=10,
        source=f"{HF}/ncbi/MedCalc-Bench-v1.0 test split (revision main; upstream HELM is unpinned too)",
        loader=calculation.load_medcalc_bench,
        prompt=PromptStyle("Given a patient note and a clinical question, compute the requested medical value.",
                           helm=HelmLayout("Patient note: {context}\n\nQuestion: {question}\n",
                                           output_noun="Answer only the requested quantity without units. No "
                                                       "explanation needed")),
        remote=(RemoteFile(f"{HF}/ncbi/MedCalc-Bench-v1.0/resolve/main/test_data.csv", "test_data.csv",
                           alt_names=("test_data.parquet",)),),
        args=(Arg("version", "dataset version, as upstream's medcalc_bench:version= (ncbi/MedCalc-Bench-<version>; "
                             "default v1.0)", choices=calculation.VERSIONS),),
        counts={"": 1047, "version=v1.0": 1047},
        left_out="the train split (10,053 items): evaluation is zero-shot, as upstream",
    ),
    CatalogueEntry(
        **card("mtsamples_replicate"),
        description="Generate a treatment plan from a transcribed medical report (MTSamples.com, many "
                    "specialties). The reference is the report's own PLAN (else SUMMARY or FINDINGS) line; the "
                    "report is shown up to that section only. Scored by the LLM jury (accuracy, completeness, "
                    "clarity) with ROUGE.",
        task_type=TaskType.GENERATION,
        metrics=jury("mtsamples_replicate"), max_tokens=512,
        source=f"github.com/raulista1997/benchmarkdata@{MTSAMPLES_REV}/mtsamples_processed/*.txt",
        loader=clinical_notes.load_mtsamples, args=JURY_ARGS,
        prompt=PromptStyle("Given various information about a patient, return a reasonable treatment plan for "
                           "the patient.", helm=HelmLayout("{context}", output_noun="Answer")),
        remote=(RemoteFile(f"https://api.github.com/repos/raulista1997/benchmarkdata/git/trees/{MTSAMPLES_REV}"
                           "?recursive=1", "tree.json"),),
        options={"directory": "mtsamples_processed",
                 "raw_base": f"{GH}/raulista1997/benchmarkdata/{MTSAMPLES_REV}/mtsamples_processed"},
        instance_sets=_mtsamples_sets("MedHELM's leaderboard evaluated 427 notes, a count not re-checked offline "
                                      "against the files", "539 at the pinned commit: more notes than MedHELM's "
                                                           "leaderboard (427)"),
        counts={"instance_set=leaderboard": 427, "instance_set=all": 539},
        left_out="notes without a PLAN, SUMMARY or FINDINGS section (no reference); instance_set=leaderboard also "
                 "leaves out what upstream's code skipped (see the instance_set argument)",
    ),
    CatalogueEntry(
        **card("medec"),
        description="Detect and correct a medical error in a clinical note (MEDEC, Ben Abacha et al., 2024; "
                    "MS test set, 597 notes). Each note is correct or holds one error (diagnosis, management, "
                    "treatment, pharmacotherapy or causal organism); the model answers CORRECT or the erroneous "
                    "sentence's id with a corrected sentence. Scored on the error flag and on the sentence id.",
        task_type=TaskType.GENERATION,
        metrics=(MetricSpec("medec"),), max_tokens=256,
        source=f"github.com/abachaa/MEDEC@{MEDEC_REV}/MEDEC-MS/MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
        loader=literature.load_medec,
        prompt=PromptStyle(
            "The following is a medical narrative about a patient. You are a skilled medical doctor reviewing "
            "the clinical text. The text is either correct or contains one error. The text has a sentence per "
            "line. Each line starts with the sentence ID, followed by a space character then the sentence to "
            "check. Check every sentence of the text. If the text is correct return the following output: "
            "CORRECT. If the text has a medical error, return the sentence ID of the sentence containing the "
            "error, followed by a space, and a corrected version of the sentence.",
            helm=HelmLayout("{context}", input_noun="Clinical Note", output_noun="Answer")),
        remote=(RemoteFile(f"{GH}/abachaa/MEDEC/{MEDEC_REV}/MEDEC-MS/"
                           "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv",
                           "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"),),
        counts={"": 597},
        left_out="the UW test set and the training/validation files (upstream uses the MS test set only); the "
                 "file's 328 trailing empty rows are skipped and counted",
    ),
    CatalogueEntry(
        **card("head_qa"),
        description="Multiple-choice questions from Spanish healthcare specialisation exams (medicine, "
                    "nursing, psychology, chemistry, pharmacology, biology), English version, test split; "
                    "questions that need an image are left out (HEAD-QA, Vilares & Gómez-Rodríguez, 2019).",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source=f"{HF}/dvilares/head_qa config en, split test (parquet conversion; upstream unpinned)",
        loader=exams.load_head_qa,
        prompt=PromptStyle("You are a highly knowledgeable AI assistant specializing in biomedical sciences. Your task "
                           "is to answer multiple-choice questions accurately based on the options provided. Each "
                           "question will relate to biomedical concepts, and you will be asked to choose the most "
                           "appropriate answer.\n\nSelect the correct answer by outputting only the letter "
                           "corresponding to your choice (A, B, C, or D).",
                           helm=HelmLayout(input_noun="Question", output_noun="Answer", joint=True)),
        remote=(RemoteFile(f"{HF}/dvilares/head_qa/resolve/refs%2Fconvert%2Fparquet/en/test/0000.parquet",
                           "en/test/0000.parquet"),),
        args=(Arg("language", "dataset language config, as upstream's head_qa:language= (default en)",
                  choices=exams.HEAD_QA_LANGUAGES),
              Arg("category", "one exam category, as upstream's head_qa:category= (None = all, the default)",
                  choices=("None",) + exams.HEAD_QA_CATEGORIES)),
        left_out="the train and validation splits (zero-shot) and questions that need an image, as upstream",
        count_note="the parquet conversion is not pinned upstream (MedHELM loads dvilares/head_qa without a "
                   "revision), and how many test questions need an image was not recorded offline",
    ),
    CatalogueEntry(
        **card("medbullets"),
        description="USMLE Step 2/3-style clinical vignettes with five options, written by Medbullets "
                    "(Chen et al., 2024, op5 file).",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="github.com/HanjieChen/ChallengeClinicalQA@main/medbullets/medbullets_op5.csv "
               "(upstream unpinned; mirror the file to pin it)",
        loader=exams.load_medbullets,
        prompt=PromptStyle("You are a highly knowledgeable AI assistant specializing in medicine. Your task is to "
                           "answer medical questions similar to those found on the USMLE Step 2/3 exams. You will be "
                           "provided with a clinical scenario followed by several multiple-choice options.\n\n"
                           "Select the correct answer by outputting only the letter corresponding to your choice "
                           "(A, B, C, D, or E).",
                           helm=HelmLayout(input_noun="Clinical Scenario", output_noun="Answer", joint=True)),
        remote=(RemoteFile(f"{GH}/HanjieChen/ChallengeClinicalQA/refs/heads/main/medbullets/medbullets_op5.csv",
                           "medbullets_op5.csv"),),
        counts={"": 308},
    ),
    CatalogueEntry(
        **card("medhelm_med_qa"),
        description="Answer USMLE-style clinical knowledge questions with four options (MedQA, Jin et al., 2021; "
                    "US English, 4-option test split of 1,273 questions).",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="Google Drive zip 1ImYUSLk9JbgHXOemfvyiDiirluZHPeQw: "
               "data_clean/questions/US/4_options/phrases_no_exclude_test.jsonl",
        loader=exams.load_med_qa,
        prompt=PromptStyle(HELM_LETTER_ABCD, helm=HelmLayout(input_noun="Question", output_noun=HELM_RESPOND_ABCD,
                                                             joint=True)),
        remote=tuple(RemoteFile("https://drive.usercontent.google.com/download?id=1ImYUSLk9JbgHXOemfvyiDiirluZHPeQw"
                                "&export=download&confirm=t", f"phrases_no_exclude_{split}.jsonl",
                                member=f"US/4_options/phrases_no_exclude_{split}.jsonl") for split in ("dev", "test")),
        instance_sets=split_or_leaderboard(
            "the whole test split (1,273 questions), the population of the leaderboard's column but more "
            "questions than it scored",
            "the 503 test questions of HELM's seeded draw of 1,000 from dev + test (upstream evaluated both "
            "splits; only the test part reached the leaderboard); reads the dev file too"),
        counts={"instance_set=test": 1273, "instance_set=leaderboard": 503},
        left_out="the dev split (1,272 questions) as instances: upstream sampled dev and test together, but only "
                 "test reached the leaderboard (instance_set=leaderboard reads dev to redo that draw); train "
                 "(zero-shot)",
    ),
    CatalogueEntry(
        **card("medhelm_med_mcqa"),
        description="Four-option questions from Indian medical entrance exams (AIIMS, NEET PG) across 21 "
                    "subjects (MedMCQA, Pal et al., 2022); the dev file is the evaluation split.",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="Google Drive zip 15VkJdq5eyWIkfb_aoD3oS8i4tScbHYky: dev.json",
        loader=exams.load_med_mcqa,
        prompt=PromptStyle(HELM_LETTER_ABCD, helm=HelmLayout(input_noun="Question", output_noun=HELM_RESPOND_ABCD,
                                                             joint=True)),
        remote=(RemoteFile("https://drive.usercontent.google.com/download?id=15VkJdq5eyWIkfb_aoD3oS8i4tScbHYky"
                           "&export=download&confirm=t", "dev.json", member="dev.json"),),
        counts={"": 4183},
        left_out="the train file (zero-shot); MedMCQA's test split has no public answers",
    ),
    CatalogueEntry(
        **card("aci_bench"),
        description="Write a clinical note (history of present illness, physical exam, results, assessment "
                    "and plan) from a doctor-patient conversation (ACI-Bench, Yim et al., 2023; the three "
                    "test sets). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION,
        metrics=jury("aci_bench"), max_tokens=768,
        source=f"github.com/wyim/aci-bench@{ACI_REV}/data/challenge_data_json/ ({', '.join(ACI_TESTS)})",
        loader=clinical_notes.load_aci_bench,
        args=JURY_ARGS + (Arg("subset", "one test set instead of all three", default="all",
                              choices=("all", "clinicalnlp_taskB_test1", "clinicalnlp_taskC_test2",
                                       "clef_taskC_test3")),),
        prompt=PromptStyle("Summarize the conversation to generate a clinical note with four sections:\n"
                           "1. HISTORY OF PRESENT ILLNESS\n2. PHYSICAL EXAM\n3. RESULTS\n4. ASSESSMENT AND PLAN\n\n"
                           "The conversation is:",
                           helm=HelmLayout("Doctor-patient dialogue:\n\n{context}", input_noun="Conversation",
                                           output_noun="Clinical Note")),
        remote=tuple(RemoteFile(f"{GH}/wyim/aci-bench/{ACI_REV}/data/challenge_data_json/{n}", n) for n in ACI_TESTS),
        counts={"subset=all": 120, "subset=clinicalnlp_taskB_test1": 40, "subset=clinicalnlp_taskC_test2": 40,
                "subset=clef_taskC_test3": 40},
        left_out="the train file (zero-shot; upstream loads it but evaluates the test files only)",
    ),
    CatalogueEntry(
        **card("mtsamples_procedures"),
        description="Generate the plan (else summary or findings) that follows an operative or procedure "
                    "note from MTSamples. Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION,
        metrics=jury("mtsamples_procedures"), max_tokens=512,
        source=f"github.com/raulista1997/benchmarkdata@{BENCHDATA_REV}/mtsample_procedure/*.txt "
               "(listing pinned too; upstream listed the default branch)",
        loader=clinical_notes.load_mtsamples, args=JURY_ARGS,
        prompt=PromptStyle("Here are information about a patient, return a reasonable treatment plan for the "
                           "patient.", helm=HelmLayout("{context}", input_noun="Patient Notes", output_noun="Answer")),
        remote=(RemoteFile(f"https://api.github.com/repos/raulista1997/benchmarkdata/git/trees/{BENCHDATA_REV}"
                           "?recursive=1", "tree.json"),),
        options={"directory": "mtsample_procedure", "input_cut": "any_section",
                 "raw_base": f"{GH}/raulista1997/benchmarkdata/{BENCHDATA_REV}/mtsample_procedure"},
        instance_sets=_mtsamples_sets("upstream listed the folder on the repository's default branch at its run "
                                      "time; the leaderboard's count was not recorded here", "more notes than "
                                      "upstream's rule where a note's header is not in upper case"),
        count_note="the file listing is read from the pinned git tree at run time; the number of .txt files "
                   "in it was not recorded offline",
    ),
    CatalogueEntry(
        **card("medication_qa"),
        description="Answer consumers' questions about medications (Ben Abacha et al., MedInfo 2019; ~690 "
                    "questions with pharmacist-sourced answers). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION, metrics=jury("medication_qa"), max_tokens=512,
        source="github.com/abachaa/Medication_QA_MedInfo2019@master/MedInfo2019-QA-Medications.xlsx "
               "(upstream unpinned; mirror the file to pin it)",
        loader=patient_questions.load_medication_qa, args=JURY_ARGS,
        prompt=PromptStyle("Please answer the following consumer health question.",
                           helm=HelmLayout(input_noun="Question", output_noun="Answer")),
        counts={"": 689}, left_out="questions whose answer is empty or n/a (one), as upstream (pandas NA)",
        remote=(RemoteFile(f"{GH}/abachaa/Medication_QA_MedInfo2019/master/MedInfo2019-QA-Medications.xlsx",
                           "MedInfo2019-QA-Medications.xlsx"),),
    ),
    CatalogueEntry(
        **card("med_dialog"),
        description="Summarise a patient-doctor conversation in one sentence (MedDialog English, BioBART "
                    "splits; subset=healthcaremagic or icliniq). Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION,
        metrics=jury("med_dialog"), max_tokens=80,
        source="CodaLab bundle 0x82f0c47f6d3e4462ae9ef8ea39eebe64/<subset>/test.json",
        loader=patient_questions.load_med_dialog,
        args=(Arg("subset", "which dialogue source", choices=("healthcaremagic", "icliniq"), required=True),)
        + JURY_ARGS,
        prompt=PromptStyle("Generate a one sentence summary of this patient-doctor conversation.",
                           helm=HelmLayout("{context}", input_noun="Patient-Doctor", output_noun="Summary")),
        remote=tuple(RemoteFile(f"{MEDDIALOG_BUNDLE}/{s}/test.json", "test.json") for s in ("healthcaremagic", "icliniq")),
        counts={"subset=healthcaremagic": 22642, "subset=icliniq": 3108},
        left_out="the train and validation splits (zero-shot)",
    ),
    CatalogueEntry(
        **card("medi_qa"),
        description="Answer consumer health questions (MEDIQA 2019 QA task, 150 test questions); the "
                    "reference is the answer the experts ranked first. Scored by the LLM jury with ROUGE.",
        task_type=TaskType.GENERATION, metrics=jury("medi_qa"),
        max_tokens=1024, source=f"{HF}/bigbio/mediqa_qa@{MEDIQA_REV} (config mediqa_qa_source, split test)",
        loader=patient_questions.load_medi_qa, args=JURY_ARGS,
        prompt=PromptStyle("Answer the following consumer health question.",
                           helm=HelmLayout(input_noun="Question", output_noun="Answer")),
        remote=(RemoteFile(f"{HF}/bigbio/mediqa_qa/resolve/refs%2Fconvert%2Fparquet/mediqa_qa_source/test/0000.parquet",
                           "mediqa_qa_source/test/0000.parquet"),),
        counts={"": 150},
    ),
    CatalogueEntry(
        **card("pubmed_qa"),
        description="Answer a biomedical research question yes, no or maybe from a PubMed abstract "
                    "(PubMedQA PQA-L, Jin et al., 2019; the 1,000 expert-labelled items).",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source=f"github.com/pubmedqa/pubmedqa@{PUBMEDQA_REV}/data/ori_pqal.json",
        loader=literature.load_pubmed_qa,
        prompt=PromptStyle("Answer A for yes, B for no or C for maybe. Do not include any explanation or "
                           "additional text. Output only the letter on a single line.",
                           helm=HelmLayout("Context: {context}\n\nQuestion: {question}\n", input_noun="Question",
                                           output_noun="Answer", joint=True)),
        remote=(RemoteFile(f"{GH}/pubmedqa/pubmedqa/{PUBMEDQA_REV}/data/ori_pqal.json", "ori_pqal.json"),),
        counts={"": 1000},
    ),
    CatalogueEntry(
        **card("ehr_sql"),
        description="Write the SQL query that answers a clinical research question over the eICU database "
                    "schema, or nothing if the question cannot be answered (EHRSQL, Lee et al., 2022; test "
                    "split). Scored by executing the gold and the generated query on a read-only copy of the "
                    "database with a time limit.",
        task_type=TaskType.CODE,
        metrics=(MetricSpec("ehr_sql_execution_accuracy"), MetricSpec("exact_match")),
        max_tokens=1024,
        source=f"github.com/glee4810/EHRSQL@{EHRSQL_REV}/dataset/ehrsql/eicu/{{test.json,eicu.sql}} + "
               f"github.com/raulista1997/benchmarkdata@{BENCHDATA_REV}/eicu.sqlite",
        loader=calculation.load_ehr_sql,
        prompt=PromptStyle(EHRSQL_INSTRUCTIONS, helm=HelmLayout(EHRSQL_INPUT, input_noun="Medical Question + Schema",
                                                                output_noun="SQL Query")),
        remote=(RemoteFile(f"{GH}/glee4810/EHRSQL/{EHRSQL_REV}/dataset/ehrsql/eicu/valid.json", "valid.json"),
                RemoteFile(f"{GH}/glee4810/EHRSQL/{EHRSQL_REV}/dataset/ehrsql/eicu/test.json", "test.json"),
                RemoteFile(f"{GH}/glee4810/EHRSQL/{EHRSQL_REV}/dataset/ehrsql/eicu/eicu.sql", "eicu.sql"),
                RemoteFile(f"https://github.com/raulista1997/benchmarkdata/raw/{BENCHDATA_REV}/eicu.sqlite",
                           "eicu.sqlite")),
        instance_sets=split_or_leaderboard(
            "the eICU test split only (test.json); MedHELM's leaderboard also drew from the valid split, which "
            "upstream mapped to its test split",
            "the 1,000 questions of HELM's seeded draw from the eICU valid and test splits together (valid.json + "
            "test.json; upstream mapped both to its test split)"),
        counts={"instance_set=leaderboard": 1000},
        left_out="the train split (zero-shot); the valid split unless instance_set=leaderboard",
        count_note="the number of eICU questions in test.json (instance_set=test) at the pinned revision was "
                   "not recorded offline (later EHRSQL releases changed the files)",
    ),
    CatalogueEntry(
        **card("race_based_med"),
        description="Decide whether a model's answer to a medical question propagates race-based medicine "
                    "(harmful, inaccurate or race-based content), from the supplement of Omiye et al., npj "
                    "Digital Medicine 2023, where reviewers marked such content in red.",
        task_type=TaskType.MULTIPLE_CHOICE, metrics=CHOICE, max_tokens=1,
        source="static-content.springer.com/esm/art%3A10.1038%2Fs41746-023-00939-z/MediaObjects/"
               "41746_2023_939_MOESM1_ESM.docx",
        loader=patient_questions.load_race_based_med,
        prompt=PromptStyle("Answer A for yes, B for no.", helm=HelmLayout(
            RACE_INPUT, output_noun="Respond with only 'A' for yes or 'B' for no. Do not add any other text, "
                                    "punctuation, or symbols", joint=True)),
        remote=(RemoteFile("https://static-content.springer.com/esm/art%3A10.1038%2Fs41746-023-00939-z/"
                           "MediaObjects/41746_2023_939_MOESM1_ESM.docx", "41746_2023_939_MOESM1_ESM.docx"),),
        instance_sets=(
            InstanceSet("leaderboard", "each question-response pair once: upstream keyed the pairs by their "
                                       "prompt, so the supplement's 4 repeated pairs counted once (first position, "
                                       "last label)", leaderboard=True),
            InstanceSet("all", "every pair of the supplement, the 4 repeated pairs included (not MedHELM's set)"),
        ),
        count_note="the number of question-answer pairs depends on how the supplement's tables parse; not "
                   "recorded offline",
    ),
    CatalogueEntry(
        **card("medhallu"),
        description="Decide whether an answer to a PubMed-based question is factual (0) or hallucinated (1) "
                    "given world knowledge (MedHallu, Pandit et al., 2025; pqa_labeled, 1,000 questions, each "
                    "with its ground-truth and its hallucinated answer).",
        task_type=TaskType.CLASSIFICATION, metrics=EXACT, max_tokens=5,
        source=f"{HF}/UTAustin-AIHealth/MedHallu@{MEDHALLU_REV} (pqa_labeled, split train)",
        loader=literature.load_medhallu,
        prompt=PromptStyle(MEDHALLU_INSTRUCTIONS, helm=HelmLayout("World Knowledge: {context}\n\n{question}\n",
                                                                 output_noun=MEDHALLU_OUTPUT)),
        counts={"": 2000},
        remote=(RemoteFile(f"{HF}/UTAustin-AIHealth/MedHallu/resolve/{MEDHALLU_REV}/pqa_labeled/"
                           "train-00000-of-00001.parquet", "pqa_labeled/train-00000-of-00001.parquet"),),
    ),
)
