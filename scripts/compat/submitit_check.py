"""Acceptance: submitit (a real Slurm client, unmodified) drives gsched
through the Slurm shims. Run by scripts/compat/submitit.sh with the shims
first on PATH and GSCHED_URL pointing at a running `gsched up`.

Each check raises on failure; the script exits non-zero if any does."""

import sys
import time

import submitit


def add(a, b):
    return a + b


def square(x):
    return x * x


def boom():
    raise ValueError("deliberate failure from inside the job")


def sleeper():
    time.sleep(120)
    return "not cancelled"


def wait_for(job, predicate, what, timeout=60):
    deadline = time.time() + timeout
    state = None
    while time.time() < deadline:
        state = job.state
        if predicate(state):
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job.job_id}: {what} not reached in {timeout}s (last state {state})")


def main(folder):
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(timeout_min=10, slurm_array_parallelism=2)
    assert ex.cluster == "slurm", ex.cluster

    # (a) a function and its return value
    job = ex.submit(add, 2, 40)
    assert job.result() == 42, job.result()
    print(f"a: job {job.job_id} returned 42")

    # (b) map_array over 5 inputs, at most 2 at once
    jobs = ex.map_array(square, [1, 2, 3, 4, 5])
    ids = [j.job_id for j in jobs]
    assert all("_" in i for i in ids), ids
    results = [j.result() for j in jobs]
    assert results == [1, 4, 9, 16, 25], results
    print(f"b: array {ids[0].split('_')[0]} returned {results}")

    # (c) a job that raises comes back as a failure with the traceback
    job = ex.submit(boom)
    try:
        job.result()
    except submitit.core.utils.FailedJobError as e:
        text = str(e)
        assert "deliberate failure from inside the job" in text, text
        assert "Traceback" in text or "ValueError" in text, text
    else:
        raise AssertionError("a raising job returned a result")
    state = wait_for(job, lambda s: s in ("FAILED", "COMPLETED"), "a final state")
    print(f"c: job {job.job_id} failed with the traceback (state {state})")

    # (d) cancel a running job. submitit's jobs ignore SIGTERM (to
    # checkpoint), so its processes live until the kill wait (10 s here)
    # ends them; the job is CANCELLED at once all the same, as in Slurm.
    job = ex.submit(sleeper)
    wait_for(job, lambda s: s == "RUNNING", "RUNNING")
    job.cancel()
    cancelled_at = time.time()
    state = None
    while time.time() < cancelled_at + 2:
        state = job.get_info(mode="force").get("State", "")
        if state.startswith("CANCELLED"):
            break
        time.sleep(0.2)
    assert state.startswith("CANCELLED"), f"job {job.job_id}: {state} 2 s after job.cancel()"
    took = time.time() - cancelled_at
    assert job.state.startswith("CANCELLED"), job.state
    print(f"d: job {job.job_id} cancelled while running: {state} after {took:.1f} s")
    print("submitit acceptance: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
