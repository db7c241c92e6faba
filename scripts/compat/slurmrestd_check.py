"""Drives gsched's slurmrestd endpoints with the OpenAPI-generated Slurm
REST client (`slurmrestapi`): each answer is parsed into the client's
pydantic models, so a wrong field name or type fails here as it would in a
dashboard built on that client. Usage: URL TOKEN USER WORKDIR."""

import json
import sys
import time
import urllib.error
import urllib.request

import slurmrestapi
from slurmrestapi.api.slurm_api import SlurmApi

url, token, user, workdir = sys.argv[1:5]
VERSIONS = ["v0041", "v0042", "v0043", "v0044"]
failures = []


def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failures.append(what)


def client(tok=token, name=user):
    conf = slurmrestapi.Configuration(host=url)
    conf.api_key["token"] = tok
    if name is not None:
        conf.api_key["user"] = name
    return SlurmApi(slurmrestapi.ApiClient(conf))


def call(api, version, op, *args, **kw):
    return getattr(api, f"slurm_{version}_{op}")(*args, **kw)


def models(version):
    m = slurmrestapi.models
    up = version.capitalize()  # V0044
    return m, up


def raw(method, path, headers=None, body=None):
    req = urllib.request.Request(url + path, method=method, headers=headers or {},
                                 data=None if body is None else json.dumps(body).encode())
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


api = client()
for v in VERSIONS:
    dotted = "v0.0." + v[-2:]
    m, up = models(v)
    ping = call(api, v, "get_ping")
    check(f"{v} ping", ping.pings and ping.pings[0].pinged == "UP", ping)
    check(f"{v} meta names the parser", ping.meta.plugin.data_parser == f"data_parser/{dotted}", ping.meta)

    job_cls = getattr(m, f"{up}JobSubmitReq")
    desc_cls = getattr(m, f"{up}JobDescMsg")
    desc = desc_cls.from_dict({
        "name": f"rest-{v}",
        "current_working_directory": workdir,
        "environment": ["PATH=/usr/bin:/bin"],
        "standard_output": f"{workdir}/rest-%j.out",
        "time_limit": {"set": True, "infinite": False, "number": 5},
        "tres_per_job": "gres/gpu:1g.5gb:1",
    })
    req = job_cls(script="#!/bin/sh\necho from-rest\nsleep 30\n", job=desc)
    sub = call(api, v, "post_job_submit", req)
    jid = sub.job_id if sub.job_id is not None else sub.result.job_id
    check(f"{v} submit returns a job id", isinstance(jid, int) and jid > 0, sub)

    got = call(api, v, "get_job", str(jid))
    check(f"{v} get_job", len(got.jobs) == 1 and got.jobs[0].job_id == jid, got)
    j = got.jobs[0]
    check(f"{v} job fields", j.name == f"rest-{v}" and j.user_name == user
          and j.time_limit.number == 5 and isinstance(j.job_state, list), j)

    listed = call(api, v, "get_jobs")
    check(f"{v} get_jobs lists it", any(x.job_id == jid for x in listed.jobs))
    since = call(api, v, "get_jobs", update_time=str(int(time.time()) + 3600))
    check(f"{v} update_time filters unchanged jobs", len(since.jobs) == 0, since.jobs)

    nodes = call(api, v, "get_nodes")
    check(f"{v} get_nodes", len(nodes.nodes) == 1, nodes)
    n = nodes.nodes[0]
    check(f"{v} node gres lists MIG instances by profile",
          n.gres == "gpu:2g.10gb:2(IDX:0-1),gpu:1g.5gb:3(IDX:2-4)", n.gres)
    one = call(api, v, "get_node", n.name)
    check(f"{v} get_node", one.nodes[0].name == n.name)
    parts = call(api, v, "get_partitions")
    check(f"{v} get_partitions", parts.partitions[0].name == "gpu", parts)

    # Wait until running, then cancel through the client.
    for _ in range(100):
        state = call(api, v, "get_job", str(jid)).jobs[0].job_state
        if state == ["RUNNING"]:
            break
        time.sleep(0.1)
    check(f"{v} job runs", state == ["RUNNING"], state)
    used = call(api, v, "get_node", n.name).nodes[0].gres_used
    check(f"{v} gres_used shows the job's isolated instance", used == "gpu:1g.5gb:1(IDX:2)", used)
    call(api, v, "delete_job", str(jid))
    for _ in range(100):
        state = call(api, v, "get_job", str(jid)).jobs[0].job_state
        if state == ["CANCELLED"]:
            break
        time.sleep(0.1)
    check(f"{v} delete_job cancels", state == ["CANCELLED"], state)

# Authentication: the client without a token, with a forged one, with a
# name that is not the token's.
st, body = raw("GET", "/slurm/v0.0.44/jobs")
check("no token: 401 with a reason", st == 401 and "token" in json.dumps(body), (st, body))
forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
st, body = raw("GET", "/slurm/v0.0.44/jobs", {"X-SLURM-USER-TOKEN": forged})
check("forged token: 401", st == 401, (st, body))
st, body = raw("GET", "/slurm/v0.0.44/jobs", {"X-SLURM-USER-TOKEN": token, "Authorization": "Bearer " + token})
check("both header forms: 401", st == 401 and "not both" in json.dumps(body), (st, body))
st, body = raw("GET", "/slurm/v0.0.40/jobs", {"X-SLURM-USER-TOKEN": token})
check("unsupported version: 404 with errors[]", st == 404 and body.get("errors"), (st, body))
st, body = raw("POST", "/slurm/v0.0.44/job/submit", {"X-SLURM-USER-TOKEN": token},
               {"job": {"current_working_directory": "/tmp"}})
check("submit without a script: 400 naming it", st == 400 and "script" in body["errors"][0]["error"], (st, body))

if failures:
    print(f"{len(failures)} check(s) failed: {failures}")
    sys.exit(1)
print("all slurmrestd client checks passed")
