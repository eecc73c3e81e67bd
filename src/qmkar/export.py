"""Transcripts -> the formats other tools read: inspect_ai logs and Every Eval Ever records.

One log per task and condition. `inspect` writes inspect_ai `.eval` logs (inspect_ai is
an optional extra, imported only here), so `inspect view` and inspect's dataframes show
qmkar runs: each question (and sample, as an epoch) is a sample whose target is the
expected values, whose score is {tp, fp, fn, correct}, and whose metadata holds where
the targets sit. `eee` writes Every Eval Ever's schema-0.3.0 layout with the standard
library only: `data/<collection>/<developer>/<model>/<uuid>.json` and its
`<uuid>_samples.jsonl`, accuracy with its Wilson interval, one line per answered question.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from qmkar import __version__
from qmkar.errors import UsageError
from qmkar.outputs import make_folder, temporary_name, write_text
from qmkar.readprogress import ReadProgress, begin
from qmkar.score import wilson_interval
from qmkar.tasks import family
from qmkar.transcript import Reading, Record, files, latest

EEE_SCHEMA = "0.3.0"
FORMATS = ("inspect", "eee")


class Group(NamedTuple):
    """The latest records of one task and condition in one transcript, and how to re-render
    their prompts."""

    task: str
    condition_id: str
    records: list[Record]
    reading: Reading


def groups(paths: Iterable[Path], progress: ReadProgress | None = None) -> list[Group]:
    """Each transcript's latest records by task and condition (`progress` is told the bytes
    to read, then read)."""
    found: list[Group] = []
    listed = files(paths)
    begin(progress, listed)
    for path in listed:
        reading = Reading(path, progress)
        by_key: dict[tuple[str, str], list[Record]] = {}
        for record in latest(reading).values():
            by_key.setdefault((record.condition.task, record.condition_id), []).append(record)
        found.extend(Group(task, key, records, reading) for (task, key), records in by_key.items())
    if not found:
        raise UsageError("no transcript records to export in " + ", ".join(map(str, paths)))
    return found


def _target(record: Record) -> list[str]:
    """The expected answer as the values a person reads (multi-part values joined by '-')."""
    answer = family(record.item.task).oracle_answer(record.item)
    return answer.split(", ") if family(record.item.task).report == "recall" else [answer]


def _where(record: Record) -> dict[str, Any]:
    item = record.item
    return {"depth": [round(d, 4) for d in item.target_depths()], "length": item.size, "key": item.query,
            "positions": item.target_positions}


def _model_name(record: Record) -> str:
    condition = record.condition
    return f"{condition.provider}/{condition.model}"


# --- inspect_ai -----------------------------------------------------------------------------


def to_inspect(paths: Iterable[Path], out: Path, progress: ReadProgress | None = None) -> list[Path]:
    """Write one .eval log per task and condition; `out` is the file when there is one log
    and ends in .eval, else a folder. Returns the paths written. `progress`: as for groups."""
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError:
        raise UsageError("export --format inspect needs inspect_ai: pip install 'qmkar[inspect]'") from None
    found = groups(paths, progress)
    single = len(found) == 1 and out.suffix == ".eval"
    written = []
    for group in found:
        path = out if single else (out / f"qmkar-{group.task}-{group.condition_id}.eval")
        with temporary_name(path, ".eval") as temporary:
            _write_eval_log(_eval_log(group), temporary)
        written.append(path)
    return written


def _write_eval_log(log: Any, path: Path) -> None:
    """inspect_ai's write_eval_log. When a write fails (a full disk), its zip writer is left
    open and, collected with the error, fails again finishing the file and prints that
    second error as a traceback: the user is told the first one, once (temporary_name)."""
    from inspect_ai.log import write_eval_log

    hook = sys.unraisablehook
    try:
        write_eval_log(log, str(path), format="eval")
        return
    except OSError as exc:
        sys.unraisablehook = lambda unraisable: None
        failure = OSError(exc.errno, exc.strerror)
    try:
        gc.collect()  # the writer, if a cycle still holds it
    finally:
        sys.unraisablehook = hook
    raise failure


def _eval_log(group: Group) -> Any:
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalError,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalSample,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
        GenerateConfig,
        ModelOutput,
        ModelUsage,
    )
    from inspect_ai.scorer import Score

    records = group.records
    first = records[0]
    model = _model_name(first)
    samples = []
    for record in records:
        prompt = group.reading.prompt(record)[0]["content"]
        sample: dict[str, Any] = dict(
            id=record.item_id, epoch=record.sample + 1, input=prompt, target=_target(record),
            metadata=_where(record), uuid=f"{group.condition_id}-{record.item_id}-{record.sample}",
            started_at=record.started_at.isoformat(), total_time=record.seconds,
            working_time=record.seconds - record.waited)
        if record.error is not None:
            sample["error"] = EvalError(message=f"{record.error.kind}: {record.error.message}", traceback="",
                                        traceback_ansi="")
            sample["messages"] = [ChatMessageUser(content=prompt)]
        else:
            answer = record.answer or ""
            content: Any = ([ContentReasoning(reasoning=record.reasoning), ContentText(text=answer)]
                            if record.reasoning else answer)
            output = ModelOutput.from_content(model=model, content=content,
                                              stop_reason="max_tokens" if record.truncated else "stop")
            if record.usage is not None:
                given, made = record.usage.input_tokens or 0, record.usage.output_tokens or 0
                usage = ModelUsage(input_tokens=given, output_tokens=made, total_tokens=given + made,
                                   reasoning_tokens=record.usage.reasoning_tokens,
                                   input_tokens_cache_read=record.usage.cached_tokens)
                output.usage = usage
                sample["model_usage"] = {model: usage}
            sample["output"] = output
            sample["messages"] = [ChatMessageUser(content=prompt),
                                  ChatMessageAssistant(content=content, model=model, source="generate")]
            if record.score is not None:
                score = record.score
                sample["scores"] = {"qmkar": Score(
                    value={"tp": score.tp, "fp": score.fp, "fn": score.fn, "correct": int(score.correct)},
                    answer=answer, explanation=f"outcome {score.outcome}",
                    metadata={"outcome": score.outcome, "fp_kinds": score.fp_kinds,
                              "truncated": record.truncated})}
        samples.append(EvalSample(**sample))
    scored = [r.score for r in records if r.score is not None]
    correct = sum(s.correct for s in scored)

    def metric(name: str, kind: str, value: float) -> EvalScore:
        return EvalScore(name=name, scorer="qmkar", scored_samples=len(scored),
                         unscored_samples=len(records) - len(scored),
                         metrics={kind: EvalMetric(name=kind, value=value)})

    # Nothing scored has no accuracy (not 0%): the log then carries no scores at all.
    results = EvalResults(total_samples=len(records), completed_samples=len(scored), scores=[
        metric("correct", "accuracy", correct / len(scored)),
        metric("tp", "sum", sum(s.tp for s in scored)),
        metric("fp", "sum", sum(s.fp for s in scored)),
        metric("fn", "sum", sum(s.fn for s in scored))] if scored else [])
    condition = first.condition
    settings = condition.settings
    ids = list(dict.fromkeys(r.item_id for r in records))
    spec = EvalSpec(
        created=min(r.started_at for r in records).isoformat(), task=f"qmkar/{group.task}",
        task_id=group.condition_id, run_id=first.run_id or group.condition_id,
        eval_id=f"{group.condition_id}-{first.run_id or 'runs'}", task_version=condition.renderer,
        task_args=condition.params, model=model, packages={"qmkar": __version__},
        dataset=EvalDataset(name=f"qmkar-{group.task}", samples=len(ids), sample_ids=ids),
        config=EvalConfig(epochs=max(r.sample for r in records) + 1),
        model_generate_config=GenerateConfig(temperature=settings.get("temperature"),
                                             max_tokens=settings.get("max_tokens"),
                                             seed=settings.get("seed")),
        metadata={"condition": condition.model_dump(mode="json"), "label": first.label or first.model})
    stats = EvalStats(started_at=min(r.started_at for r in records).isoformat(),
                      completed_at=max(r.started_at for r in records).isoformat())
    failed = [r for r in records if r.error is not None]
    if len(failed) == len(records):  # every sample errored: the run did not succeed
        kinds = ", ".join(dict.fromkeys(r.error.kind for r in failed if r.error is not None))
        error = EvalError(message=f"every one of the {len(records)} samples ended in an error ({kinds})",
                          traceback="", traceback_ansi="")
        return EvalLog(version=2, status="error", eval=spec, results=results, stats=stats, error=error,
                       samples=samples)
    return EvalLog(version=2, status="success", eval=spec, results=results, stats=stats, samples=samples)


# --- Every Eval Ever -------------------------------------------------------------------------

# Characters EEE's layout forbids in a path component.
_UNSAFE = re.compile(r'[<>:"\\|?*/\x00-\x1f&=]')


def _component(text: str) -> str:
    cleaned = _UNSAFE.sub("_", text).strip(" .") or "unnamed"
    return "model" if cleaned in ("data", "unknown") else cleaned


def _uuid4_from(text: str) -> str:
    """A stable UUIDv4-shaped name (EEE wants v4 names; the same export gives the same name)."""
    return str(uuid.UUID(bytes=hashlib.sha256(text.encode()).digest()[:16], version=4))


def _local(endpoint: str | None) -> bool:
    return endpoint is None or any(host in endpoint for host in ("localhost", "127.0.0.1", "[::1]"))


def to_eee(paths: Iterable[Path], out: Path, organization: str,
           progress: ReadProgress | None = None) -> list[Path]:
    """Write an aggregate record and its samples file per task and condition under `out`.
    Returns the aggregate files written. `progress`: as for groups."""
    written = []
    for group in groups(paths, progress):
        first = group.records[0]
        condition = first.condition
        developer, model = _component(condition.provider), _component(condition.model)
        collection = f"qmkar-{group.task}"
        name = _uuid4_from(f"{group.condition_id}/{first.run_id}/{len(group.records)}")
        folder = out / "data" / collection / developer / model
        make_folder(folder)
        when = int(min(r.started_at for r in group.records).timestamp())
        evaluation_id = f"{collection}/{developer}/{model}/{group.condition_id}/{when}"
        lines = [_eee_sample(record, group, evaluation_id, f"{developer}/{model}") for record in group.records
                 if record.score is not None]
        body = "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines)
        write_text(folder / f"{name}_samples.jsonl", body)
        aggregate = _eee_aggregate(group, evaluation_id, f"{developer}/{model}", organization, when, lines)
        aggregate["detailed_evaluation_results"] = {
            "format": "jsonl", "file_path": f"data/{collection}/{developer}/{model}/{name}_samples.jsonl",
            "hash_algorithm": "sha256", "checksum": hashlib.sha256(body.encode()).hexdigest(),
            "total_rows": len(lines)}
        path = folder / f"{name}.json"
        write_text(path, json.dumps(aggregate, indent=2, allow_nan=False) + "\n")
        written.append(path)
    return written


def _eee_aggregate(group: Group, evaluation_id: str, model_id: str, organization: str, when: int,
                   lines: list[dict[str, Any]]) -> dict[str, Any]:
    from datetime import UTC, datetime

    first = group.records[0]
    condition = first.condition
    answered = len(lines)
    correct = sum(1 for line in lines if line["evaluation"]["is_correct"])
    low, high = wilson_interval(correct, answered)
    scores = [r.score for r in group.records if r.score is not None]
    counts = {"correct": correct, "n": answered, "errors": len(group.records) - answered,
              "tp": sum(s.tp for s in scores), "fp": sum(s.fp for s in scores),
              "fn": sum(s.fn for s in scores), "truncated": sum(r.truncated for r in group.records)}
    details = {name: str(value) for name, value in counts.items()}  # EEE's details are strings
    args = {k: v for k, v in (("temperature", condition.settings.get("temperature")),
                              ("max_tokens", condition.settings.get("max_tokens"))) if v is not None}
    return {
        "schema_version": EEE_SCHEMA,
        "evaluation_id": evaluation_id,
        "evaluation_timestamp": str(when),
        "retrieved_timestamp": str(int(datetime.now(UTC).timestamp())),
        "source_metadata": {"source_name": "qmkar", "source_type": "evaluation_run",
                            "source_organization_name": organization,
                            "evaluator_relationship": "third_party"},
        "eval_library": {"name": "qmkar", "version": __version__},
        "model_info": {"name": condition.model, "id": model_id, "developer": condition.provider,
                       "additional_details": {
                           "deployment_type": ("self_deployed" if _local(condition.endpoint)
                                               else "externally_managed"),
                           "model_availability": "unknown"}},
        "evaluation_results": [{
            "evaluation_result_id": f"qmkar.{group.task}.accuracy",
            "evaluation_name": f"qmkar.{group.task}",
            "source_data": {"dataset_name": f"qmkar-{group.task}", "source_type": "other",
                            "additional_details": {"generator": f"qmkar {__version__}",
                                                   "params": json.dumps(condition.params, sort_keys=True)}},
            "metric_config": {"metric_id": "accuracy", "metric_name": "accuracy", "metric_kind": "accuracy",
                              "metric_unit": "proportion", "lower_is_better": False,
                              "score_type": "continuous", "min_score": 0.0, "max_score": 1.0},
            "score_details": {"score": correct / answered if answered else 0.0, "details": details,
                              "uncertainty": {"confidence_interval": {
                                  "lower": low, "upper": high, "confidence_level": 0.95, "method": "wilson"},
                                  "num_samples": answered}},
            "generation_config": {"generation_args": args, "additional_details": {
                "condition_id": group.condition_id, "template": condition.template,
                "label": first.label or first.model}},
        }],
    }


def _eee_sample(record: Record, group: Group, evaluation_id: str, model_id: str) -> dict[str, Any]:
    score = record.score
    assert score is not None
    prompt = group.reading.prompt(record)[0]["content"]
    reference = _target(record)
    line: dict[str, Any] = {
        "schema_version": EEE_SCHEMA, "evaluation_id": evaluation_id, "model_id": model_id,
        "evaluation_name": f"qmkar.{group.task}", "evaluation_result_id": f"qmkar.{group.task}.accuracy",
        "sample_id": record.item_id,
        "sample_hash": hashlib.sha256(json.dumps({"raw": prompt, "reference": reference}, sort_keys=True,
                                                 separators=(",", ":")).encode()).hexdigest(),
        "interaction_type": "single_turn",
        "input": {"raw": prompt, "reference": reference},
        "output": {"raw": [record.answer or ""], **({"reasoning_trace": [record.reasoning]}
                                                     if record.reasoning else {})},
        "messages": None,
        "answer_attribution": [{"turn_idx": 0, "source": "output.raw", "extraction_method": "qmkar.parse",
                                "extracted_value": json.dumps(record.parsed.values if record.parsed else []),
                                "is_terminal": True}],
        "evaluation": {"score": 1.0 if score.correct else 0.0, "is_correct": score.correct},
        "performance": {"latency_ms": round(1000 * record.seconds, 1)},
        "metadata": {"tp": str(score.tp), "fp": str(score.fp), "fn": str(score.fn), "outcome": score.outcome,
                     "sample": str(record.sample), "truncated": str(record.truncated).lower(),
                     **{k: json.dumps(v) for k, v in _where(record).items()}},
    }
    usage = record.usage
    if usage is not None and usage.input_tokens is not None and usage.output_tokens is not None:
        line["token_usage"] = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                               "total_tokens": usage.input_tokens + usage.output_tokens}
    return line
