"""Loads the gsched dashboard in headless Chromium and checks the DOM it
built against the API's own answers; saves a screenshot.
Usage: URL TOKEN JOB_ID SCREENSHOT PROFILE_DIR"""

import json
import subprocess
import sys
import urllib.request
from html.parser import HTMLParser

url, token, job_id, shot, profile = sys.argv[1:6]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--window-size=1400,1350", "--virtual-time-budget=8000"]
failures = []


def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failures.append(what)


def api(path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def chromium(*args):
    return subprocess.run(["chromium", *FLAGS, *args], capture_output=True, text=True, timeout=120)


class Dom(HTMLParser):
    """Elements with their attributes and the text inside them."""

    def __init__(self):
        super().__init__()
        self.elements, self.stack = [], []

    def handle_starttag(self, tag, attrs):
        e = {"tag": tag, "attrs": dict(attrs), "text": ""}
        self.elements.append(e)
        if tag not in ("input", "br", "img", "meta", "link", "polyline"):
            self.stack.append(e)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data):
        for e in self.stack:
            e["text"] += data

    def find(self, tag=None, cls=None, attr=None):
        return [e for e in self.elements
                if (tag is None or e["tag"] == tag)
                and (cls is None or cls in e["attrs"].get("class", "").split())
                and (attr is None or attr in e["attrs"])]


instances = api("/api/v1/instances")["instances"]
jobs = api("/api/v1/jobs?state=all")["jobs"]
isolated = {i["isolated_owner"] for i in instances if i["isolated_owner"]}
shared = {r["job_id"] for i in instances if not i["isolated_owner"] for r in i["reservations"]}
check("the API shows two isolated jobs and shared reservations", len(isolated) == 2 and len(shared) >= 5,
      (isolated, shared))

# The page a signed-in user sees, with a running isolated job opened.
opened = sorted(isolated)[0]
out = chromium("--dump-dom", f"{url}/#token={token}&job={opened}")
check("chromium ran", out.returncode == 0, out.stderr[-500:])
dom = Dom()
dom.feed(out.stdout)
body = dom.find("body")
check("the page loaded its data", body and body[0]["attrs"].get("data-loaded") == "1")
bars = dom.find("div", "bar", "data-instance")
check("one memory bar per instance", len(bars) == len(instances), (len(bars), len(instances)))
check("bars carry the API's reservations",
      {b["attrs"]["data-instance"]: int(b["attrs"]["data-reserved-mib"]) for b in bars}
      == {i["uuid"]: i["memory_reserved_mib"] for i in instances})
segs = dom.find("div", "seg", "data-job")
iso_segs = {int(s["attrs"]["data-job"]) for s in segs if "isolated" in s["attrs"]["class"]}
shared_segs = {int(s["attrs"]["data-job"]) for s in segs if "isolated" not in s["attrs"]["class"]}
check("isolated owners drawn as whole-instance bars", iso_segs == isolated, (iso_segs, isolated))
check("shared jobs drawn in the instances they reserve", shared_segs == shared, (shared_segs, shared))
rows = dom.find("tr", "job-row", "data-job-id")
active = [j for j in jobs if j["job_state"] in ("PENDING", "RUNNING")]
check("a queue row per pending or running job", len(rows) == len(active), (len(rows), len(active)))
check("the held job shows its reason", any("JobHeldUser" in r["text"] for r in rows))
check("the node is drawn", bool(dom.find("div", "node", "data-node")))
check("the utilization chart is drawn", bool([e for e in dom.elements if e["attrs"].get("id") == "util-chart"]))
detail = [e for e in dom.elements if e["attrs"].get("id") == "detail"]
check("the opened job's detail shows", detail and f"Job {opened}" in detail[0]["text"], detail[:1])
script = [e for e in dom.elements if e["attrs"].get("id") == "job-script"]
check("the owner sees the job's script", script and "sleep 300" in script[0]["text"])
check("the detail lists the state history", detail and "RUNNING" in detail[0]["text"])

# Without a token the page asks for one and shows no data.
out = chromium("--dump-dom", f"{url}/")
dom2 = Dom()
dom2.feed(out.stdout)
login = [e for e in dom2.elements if e["attrs"].get("id") == "login"]
check("without a token the sign-in form shows", login and "hidden" not in login[0]["attrs"])
check("without a token no job rows", not dom2.find("tr", "job-row"))

shot_run = chromium(f"--screenshot={shot}", f"{url}/#token={token}&job={opened}")
check("screenshot saved", shot_run.returncode == 0, shot_run.stderr[-300:])

if failures:
    print(f"{len(failures)} check(s) failed: {failures}")
    sys.exit(1)
print("all dashboard checks passed")
