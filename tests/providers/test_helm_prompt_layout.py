"""Every catalogue benchmark that declares HELM's layout (``HelmLayout``) builds the prompt HELM's own run spec and
adapter build, byte for byte: crfm-helm 0.5.16's run-spec function for the benchmark gives the adapter spec, its
``GenerationAdapter`` / ``MultipleChoiceJointAdapter`` build the example block and its ``Prompt`` joins the
instructions, in the crfm-helm venv (the oracle); ours is ``build_prompt`` on the same input. The scenario's input
text is HELM's scenario code's: for the benchmarks with data on the machine the differential against ``helm-run``
(test_helm_run_differential.py) compares whole prompts; here the instructions, nouns and layout of all of them.

The crfm-helm venv and helm-run's dependencies are the differential's fixtures; without them the test skips."""

from __future__ import annotations

import json
import os
import subprocess

from medhelm.benchmarks import PromptBudget
from medhelm.benchmarks.catalogue import all_entries, get_entry
from medhelm.benchmarks.loaders.instances import choice_instance, text_instance
from medhelm.benchmarks.prompts import build_prompt
from tests.providers.test_helm_run_differential import helm_run  # noqa: F401

# HELM's side: the run spec's adapter spec, its adapter's example block (no window service: the example methods
# read only the spec), its Prompt's text. helm.common.gpu_utils imports torch, which no prompt needs.
HELM_PROMPTS = """\
import json, sys, types
gpu = types.ModuleType("helm.common.gpu_utils")
gpu.is_cuda_available, gpu.get_torch_device_name = (lambda: False), (lambda: "cpu")
sys.modules["helm.common.gpu_utils"] = gpu
from helm.benchmark.adaptation.adapters.generation_adapter import GenerationAdapter
from helm.benchmark.adaptation.adapters.multiple_choice_joint_adapter import MultipleChoiceJointAdapter
from helm.benchmark.adaptation.prompt import Prompt
from helm.benchmark.run_spec import get_run_spec_function
from helm.benchmark.scenarios.scenario import CORRECT_TAG, Input, Instance, Output, Reference

out = {}
for name, args, text, options in json.load(sys.stdin):
    spec = get_run_spec_function(name)(**args).adapter_spec
    refs = [Reference(Output(text=o), tags=[CORRECT_TAG] if i == 0 else []) for i, o in enumerate(options)]
    inst = Instance(input=Input(text=text), references=refs or [Reference(Output(text="ref"), tags=[CORRECT_TAG])])
    joint = spec.method == "multiple_choice_joint"
    adapter = object.__new__(MultipleChoiceJointAdapter if joint else GenerationAdapter)
    adapter.adapter_spec = spec
    block = adapter.construct_example_prompt(inst, include_output=False, reference_index=None)
    out[name] = Prompt(global_prefix=spec.global_prefix, global_suffix=spec.global_suffix,
                       instance_prefix=spec.instance_prefix, substitutions=spec.substitutions,
                       instructions_block=spec.instructions, train_instance_blocks=[],
                       eval_instance_block=block).text
print(json.dumps(out))
"""

# benchmark -> HELM's run-spec arguments (a required one only)
ARGS = {"med_dialog": {"subset": "icliniq"}}
CONTEXT, QUESTION = "Line one of the passage.\nLine two, trailing space. ", "Is it so?"


def _ours(name: str):
    style = get_entry(name).prompt
    options = ("first", "second", "third", "fourth") if style.helm.joint else ()
    uses_context = "{context}" in style.helm.input_format
    context = CONTEXT if uses_context else ""
    if options:
        inst = choice_instance("x", QUESTION, options, 0, context=context)
    elif uses_context:
        inst = text_instance("x", "ref", context=context, question=QUESTION)
    else:
        inst = text_instance("x", "ref", question=QUESTION)
    helm_input = style.helm.input_format.format(context=context, question=QUESTION)
    return build_prompt(style, inst, PromptBudget()).text, [name, ARGS.get(name, {}), helm_input, list(options)]


def test_every_helm_layout_benchmark_sends_helms_prompt(helm_run):  # noqa: F811
    names = [e.name for e in all_entries() if e.prompt.helm is not None]
    assert {"pubmed_qa", "medcalc_bench", "medec", "aci_bench", "head_qa", "medbullets"} <= set(names)
    ours, queries = {}, []
    for name in names:
        ours[name], query = _ours(name)
        queries.append(query)
    env = {**os.environ, "PYTHONPATH": str(helm_run.deps)}
    done = subprocess.run([str(helm_run.python), "-c", HELM_PROMPTS], input=json.dumps(queries), text=True,
                          capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    helm = json.loads(done.stdout)
    assert {n: ours[n] for n in names if ours[n] != helm[n]} == {}, {n: helm[n] for n in names if ours[n] != helm[n]}
