"""Certificates and verdicts as data: what was checked, against what, how hard, how close;
counterexamples saved as .npz and read back."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np

from stochopt.leir import parse, render
from stochopt.machine import load_machine
from stochopt.verify import certificate, check
from stochopt.verify.replay import load_inputs


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_certificate_records_spec_kernel_seed_examples_and_errors(spec_and_baseline):
    spec, baseline = spec_and_baseline("specs/softmax.py")
    verdict = check(baseline, spec, examples=12, seed=7, baseline=baseline)
    cert = certificate(baseline, spec, verdict)
    assert cert["spec"] == "softmax" and cert["equivalent"] is True
    assert cert["spec_sha256"] == _sha(spec.source)
    # the hash covers the text as a kernel file holds it, machine header included
    assert cert["kernel_sha256"] == _sha(render(baseline, load_machine("mncore2")))
    assert cert["seed"] == 7 and cert["examples"] == 12
    assert cert["machine"] == "mncore2"
    assert 0 <= cert["max_semantic_error"] <= 1 and 0 <= cert["max_precision_error"] <= 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cert["checked_at"])
    assert {"stochopt", "numpy", "hypothesis", "ml_dtypes"} <= set(cert["versions"])
    assert json.loads(json.dumps(cert)) == cert


def test_kernel_hash_follows_the_canonical_text(spec_and_baseline, repo):
    spec, baseline = spec_and_baseline("specs/softmax.py")
    verdict = check(baseline, spec, examples=10, baseline=baseline)
    same = parse(render(baseline))
    other = parse((repo / "docs/examples/softmax_fast.leir").read_text())
    hashes = [certificate(k, spec, verdict)["kernel_sha256"] for k in (baseline, same, other)]
    assert hashes[0] == hashes[1] != hashes[2]


def test_refused_verdict_reports_check_index_expected_got(read_corpus, repo, tmp_path):
    entry = read_corpus(repo / "tests/verify/corpus/wrong/rmsnorm__eps_changed.leir")
    verdict = check(entry.kernel, entry.spec, examples=10, baseline=entry.baseline)
    path = verdict.counterexample.save(tmp_path / "cex" / "eps.npz")
    facts = verdict.to_json()
    assert facts["equivalent"] is False
    cex = facts["counterexample"]
    m = verdict.counterexample.mismatch
    assert cex["check"] == m.check == "semantics"
    assert cex["index"] == list(m.index) and cex["expected"] == m.expected
    assert cex["got"] == m.got and cex["inputs_npz"] == path
    assert json.loads(json.dumps(facts)) == facts
    # the saved arrays are the inputs, bit for bit, in each input's dtype
    replay = load_inputs(path, entry.spec)
    for name, x in verdict.counterexample.inputs.items():
        assert replay[name].dtype == x.dtype and np.array_equal(replay[name], x)


def test_saved_bf16_inputs_read_back_exactly(read_corpus, repo, tmp_path):
    entry = read_corpus(repo / "tests/verify/corpus/wrong/mla_decode__pe_term_dropped.leir")
    verdict = check(entry.kernel, entry.spec, examples=5, baseline=entry.baseline)
    replay = load_inputs(verdict.counterexample.save(tmp_path / "mla.npz"), entry.spec)
    again = check(entry.kernel, entry.spec, examples=1, structured=False,
                  extra_inputs=[replay], baseline=entry.baseline)
    assert again.counterexample.mismatch == verdict.counterexample.mismatch
