"""Synthetic inputs for the real-HELM fixture suite: a yes/no and a jury configurable benchmark (HELM's
``medhelm_configurable_benchmark`` YAML + prompt + CSV) and a CSV in ``shc_conf_med``'s columns. No patient
data: every row is generated here."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

YESNO_ROWS, JURY_ROWS, CONF_ROWS = 20, 10, 10
JUDGES = (("mock/gpt-4-judge-1", "mockorg/gpt-4-judge-1"), ("mock/gpt-4-judge-2", "mockorg/gpt-4-judge-2"))


def write(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "yesno_prompt.txt").write_text("Case {case_id}: {note} {flag}\nIs follow-up needed? Answer Yes or No.\n")
    with open(root / "yesno.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case_id", "note", "flag", "correct_answer", "incorrect_answers"])
        for i in range(YESNO_ROWS):
            yes = i % 3 != 0
            w.writerow([f"c{i:02d}", f"Synthetic visit {i}, stable vitals.", "[y]" if yes else "[n]",
                        "Yes" if yes else "No", json.dumps(["No" if yes else "Yes"])])
    (root / "yesno.yaml").write_text(
        "name: followup_yesno\ndescription: Synthetic yes/no follow-up triage\nprompt_file: yesno_prompt.txt\n"
        "dataset_file: yesno.csv\nmax_tokens: 4\nmetrics:\n  - name: exact_match\n")
    (root / "summary_prompt.txt").write_text("Summarise this synthetic note in one sentence: {note}\n")
    with open(root / "summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["note", "correct_answer"])
        for i in range(JURY_ROWS):
            w.writerow([f"Synthetic patient {i} reports mild cough for {i + 2} days, no fever.",
                        f"Mild cough for {i + 2} days without fever."])
    (root / "judge_prompt.txt").write_text(
        "Rate the summary.\n<question>{QUESTION}</question>\n<response>{RESPONSE}</response>\n"
        "<gold>{GOLD_RESPONSE}</gold>\nScore each criterion from 0 to 4 and answer in JSON:\n"
        '<rubric_criteria>\n{"accuracy": {"score": 0, "explanation": ""}, '
        '"clarity": {"score": 0, "explanation": ""}}\n</rubric_criteria>\n')
    judges = "".join(f"      - name: {dep}\n        model_name: {model}\n" for dep, model in JUDGES)
    (root / "summary.yaml").write_text(
        "name: note_summary_jury\ndescription: Synthetic one-sentence summaries judged by a jury\n"
        "prompt_file: summary_prompt.txt\ndataset_file: summary.csv\nmax_tokens: 40\nmetrics:\n"
        f"  - name: jury_score\n    prompt_file: judge_prompt.txt\n    judges:\n{judges}")
    with open(root / "shc_conf.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", "context", "label"])
        for i in range(CONF_ROWS):
            w.writerow([f"Does synthetic note {i} hold confidential content?",
                        f"Synthetic adolescent visit {i}: discussed {'school' if i % 2 else 'sleep'}.",
                        "A" if i % 3 else "B"])


if __name__ == "__main__":
    write(Path(sys.argv[1]))
