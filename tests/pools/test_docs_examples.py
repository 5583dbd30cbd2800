"""Every command the README and the guides show, and every file under examples/, works verbatim
on a freshly seeded demo (issue 21, item 1): the commands of each document's ```sh blocks run in
document order through bash against a live server holding `manage.py seed_demo`'s data, with the
demo pools' nodes Ready as `make run` has them after about 15 s.

What the test supplies, as a reader at the demo would:
- the password `ebcloud login` prompts for (the demo prints them; here from var/demo-passwords.json);
- `$TOKEN`, the token of the user the document last logged in with (what `POST
  /api/v1/auth/token/` returns for that user, and what `ebcloud login` keeps);
- the live server's address in place of `http://127.0.0.1:8000`, the only text changed;
- `curl` with `--fail-with-body`, so that a non-2xx answer fails the command.
`manage.py` commands run in this process (`call_command`): the test database is in-memory
SQLite or a PostgreSQL database only this process knows; their arguments stay verbatim.

Each document gets a fresh demo, since each is read by someone starting from `make run` (the
README and the team lead's guide both create train-pool-a). Commands that cannot run against a
demo are listed in `NOT_RUN`, each with its reason; a command neither run nor listed fails the
test, and so does a listed one no document shows any more.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from ebcloud import config as ebcloud_config
from pools.controllers.lifecycle import reconcile_all
from pools.controllers.scheduler import scheduler_pass
from pools.management.commands.seed_demo import DEMO_POOLS
from pools.management.commands.seed_demo import Command as SeedDemo
from pools.models import GpuNodePool, Node, Pod, PoolOrder, PriorityClass

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/guide-team-lead.md", "docs/guide-admin.md", "docs/guide-finance.md", "docs/pods.md",
        "docs/cli.md", "docs/operator.md", "docs/lifecycle.md", "docs/api.md")
DEMO_URL = "http://127.0.0.1:8000"
ARTICLE_POD = ("algorithm", "bert-train-0")
DEMO_TRAIN_POOL = "train-pool-demo"
# The command after which the article's pod must be bound, and to a node of which pool.
POD_SUBMIT = "ebcloud pod create -f examples/pods/train-pod.yaml"
FOLLOW_S = 3  # how long a command that follows until Ctrl-C must keep running
COMMAND_TIMEOUT_S = 60

PRODUCTION = "shows a production install (its own host, database, env file or secrets), not the demo"
NOT_RUN = {  # command as the document shows it (continuations joined) -> why the test does not run it
    "make run": "starts the demo itself: the live server here is that demo",
    "make test": "runs the whole suite, this test among it",
    "python -m monitoring.agent --server https://control-plane.example --join-token ID.SECRET --node train-pool-demo-1-001":
        "runs on a GPU node against a control plane of its own; ID.SECRET stands for a token a page shows once",
    "git clone <repository> /opt/ebcloud && cd /opt/ebcloud": PRODUCTION,
    "python3 -m venv .venv && .venv/bin/pip install -e .": PRODUCTION,
    'SECRET_KEY=<50+ random characters: python3 -c "import secrets; print(secrets.token_urlsafe(50))">': PRODUCTION,
    "set -a; . /etc/ebcloud/ebcloud.env; set +a": PRODUCTION,
    ".venv/bin/python manage.py check --deploy": PRODUCTION,
    ".venv/bin/python manage.py migrate": PRODUCTION,
    ".venv/bin/python manage.py createsuperuser": PRODUCTION,
    ".venv/bin/python manage.py collectstatic --noinput": PRODUCTION,
    'pg_dump --format=custom --file=ebcloud-$(date -u +%Y%m%dT%H%M%SZ).dump "$DATABASE_URL"': PRODUCTION,
    "pg_restore --no-owner --role=ebcloud --dbname=ebcloud ebcloud-....dump": PRODUCTION,
    ".venv/bin/granian --interface wsgi config.wsgi:application --host 127.0.0.1 --port 8000 --workers 2 --blocking-threads 2 --backlog 2048 --access-log": PRODUCTION,
    ".venv/bin/python manage.py qcluster": PRODUCTION,
    'curl -H "Authorization: Token $ADMIN_TOKEN" -H "Content-Type: application/json" -d \'{"node": "train-pool-a-m-0", "ttlSeconds": 3600}\' https://pools.example.com/api/agent/v1/join-tokens/': PRODUCTION,
    "python -m monitoring.agent --server https://pools.example.com --join-token abc123.0123456789abcdef --node train-pool-a-m-0 --buffer-dir /var/lib/ebcloud-agent --count 1": PRODUCTION,
}
# Lines of an environment file shown in a sh block (NAME=value), not commands.
ENV_LINE = re.compile(r"^[A-Z][A-Z0-9_]*=\S*$")


def sh_commands(text: str) -> list[str]:
    """The commands of the ```sh blocks, in order: continuation lines joined, comments and
    blank lines dropped (a trailing comment stays: bash reads it as one)."""
    commands, block, pending = [], False, ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            block = line == "```sh"
            continue
        if not block or not line or (line.startswith("#") and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


def _without_comment(command: str) -> str:
    return command.split("  #")[0].strip()


def shown(document: str) -> list[str]:
    return [c for c in sh_commands((ROOT / document).read_text()) if not ENV_LINE.match(_without_comment(c))]


def test_every_command_shown_is_run_or_listed_with_its_reason():
    every = {_without_comment(c) for doc in DOCS for c in shown(doc)}
    assert not set(NOT_RUN) - every, "listed commands no document shows any more"
    runnable = [c for c in every if c not in NOT_RUN]
    assert all(c.startswith(("ebcloud ", "curl ", ".venv/bin/python manage.py ")) for c in runnable), runnable


# ----------------------------------------------------------------------------- the demo


class Demo:
    """A freshly seeded demo behind a live server, and a reader's shell at it."""

    def __init__(self, live_server, settings, tmp_path):
        settings.VAR_DIR = tmp_path / "var"
        # The demo's fast cloud, faster: every provisioning step is due at once, so a few passes
        # bring the nodes Ready without waiting the demo's 15 s.
        settings.EBCLOUD_SIM_STEP_SECONDS = dict.fromkeys(settings.SIM_STEP_SECONDS_REALISTIC, 0)
        SeedDemo().handle(no_pools=False)
        self.passwords = json.loads((tmp_path / "var" / "demo-passwords.json").read_text())
        self.url = live_server.url
        self.home = tmp_path / "home"
        self.home.mkdir()
        for name in ("examples", ".venv"):  # relative paths resolve as in a clone's root
            (self.home / name).symlink_to(ROOT / name)
        self.config = self.home / "ebcloud.yaml"
        self.token = ""
        self.ready()

    def ready(self) -> None:
        """Reconcile until every approved demo pool's nodes are Ready, as the demo's clock does."""
        approved = sum(1 for _, _, approve in DEMO_POOLS if approve)
        for _ in range(40):
            reconcile_all()
            pools = GpuNodePool.objects.active().filter(orders__status=PoolOrder.Status.PAID).distinct()
            ready = [p for p in pools if Node.objects.filter(pool=p, phase=Node.Phase.READY).count() >= p.document["spec"]["nodeCount"]["min"]]
            if len(ready) >= approved:
                return
        raise AssertionError(f"the demo pools are not Ready: {list(Node.objects.values_list('name', 'phase'))}")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("EBCLOUD_")}
        env.update({"HOME": str(self.home), "EBCLOUD_CONFIG": str(self.config), "TOKEN": self.token,
                    "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"})
        return env

    def script(self, command: str) -> str:
        body = command.replace(DEMO_URL, self.url)
        return f'set -e -o pipefail\ncurl() {{ command curl --silent --show-error --fail-with-body "$@"; }}\n{body}\n'

    def run(self, command: str) -> subprocess.CompletedProcess:
        """One command as the document shows it; its output, for the assertion message."""
        if command.startswith(".venv/bin/python manage.py "):
            args = shlex.split(command, comments=True)[2:]
            call_command(*args)
            return subprocess.CompletedProcess(args, 0, "", "")
        login = re.search(r"^ebcloud login .*--username (\S+)", command)
        stdin = self.passwords[login.group(1)] + "\n" if login else ""
        if "--watch" in command:
            return self._follow(command)
        result = subprocess.run(["bash", "-c", self.script(command)], cwd=self.home, env=self.env(), input=stdin,
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        assert result.returncode == 0, f"{command}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}"
        if login:
            self.token = ebcloud_config.read_file(self.config).token
        return result

    def _follow(self, command: str) -> subprocess.CompletedProcess:
        """A command that prints until Ctrl-C: it must print and keep running; then Ctrl-C. It
        starts with Ctrl-C's default action, as from a terminal: a suite started in the
        background (`cmd &`) has SIGINT ignored, and its children would inherit that."""
        process = subprocess.Popen(["bash", "-c", "exec " + command.replace(DEMO_URL, self.url)], cwd=self.home,
                                   env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
        time.sleep(FOLLOW_S)
        alive = process.poll() is None
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=COMMAND_TIMEOUT_S)
        assert alive and out.strip(), f"{command}\nstopped early: {process.returncode}\n{out}\n{err}"
        return subprocess.CompletedProcess(command, 0, out, err)


@pytest.fixture
def demo(live_server, settings, tmp_path):
    return Demo(live_server, settings, tmp_path)


def assert_article_pod_bound() -> Node:
    """The scheduler's pass, as the demo's clock runs it, binds the article's pod to a node of
    the demo's training pool: the only pool whose nodes are labelled pool=train."""
    scheduler_pass()
    pod = Pod.objects.select_related("node__pool").get(namespace=ARTICLE_POD[0], name=ARTICLE_POD[1])
    assert pod.phase == Pod.Phase.RUNNING and pod.node is not None, (pod.phase, pod.explanation)
    assert pod.node.pool.name == DEMO_TRAIN_POOL
    return pod.node


def live(test):
    """Against the live server; the database's ids start at 1, as in a fresh `make run` (the
    admin guide names the demo's pending order by its number)."""
    test = pytest.mark.skipif(shutil.which("curl") is None, reason="the docs' API examples use curl")(test)
    return pytest.mark.live(pytest.mark.django_db(transaction=True, reset_sequences=True)(test))
RUN = [doc for doc in DOCS if any(_without_comment(c) not in NOT_RUN for c in shown(doc))]


@live
@pytest.mark.parametrize("document", RUN)
def test_each_documents_commands_work_verbatim_on_a_fresh_demo(document, demo):
    ran = []
    for command in shown(document):
        if _without_comment(command) in NOT_RUN:
            continue
        demo.run(command)
        ran.append(command)
        if command == POD_SUBMIT:
            assert_article_pod_bound()
    assert ran


EXAMPLE_POOLS = {  # file -> the lead who applies it (a pool belongs to its lead's team)
    "create-train-pool.yaml": "lead-algorithm", "train-pool-with-scaling.yaml": "lead-algorithm",
    "demo-train-pool.yaml": "lead-algorithm", "batch-preemptible-pool.yaml": "lead-algorithm",
    "inference-pool.yaml": "lead-inference",
}


@live
def test_every_example_file_applies_to_the_demo_and_the_article_pod_binds(demo):
    examples = {str(p.relative_to(ROOT / "examples")) for p in (ROOT / "examples").rglob("*.yaml")}
    assert examples == {*EXAMPLE_POOLS, "priorityclasses.yaml", "pods/train-pod.yaml", "pods/nlp-pdb.yaml"}, "a new example needs a step here"
    outputs = {}
    for name, lead in EXAMPLE_POOLS.items():
        demo.run(f"ebcloud login --server {DEMO_URL} --username {lead}")
        outputs[name] = demo.run(f"ebcloud node-pool apply -f examples/{name}").stdout
    assert "created" in outputs["create-train-pool.yaml"]  # the article's pool: the name is free on the demo
    assert "configured" in outputs["train-pool-with-scaling.yaml"]  # ... and its scaling block, on top
    for seeded in ("inference-pool.yaml", "batch-preemptible-pool.yaml", "demo-train-pool.yaml"):
        assert "unchanged" in outputs[seeded], outputs[seeded]
    # The demo loads examples/priorityclasses.yaml (what `kubectl apply -f` does on a real cluster).
    assert set(PriorityClass.objects.values_list("name", flat=True)) >= {"training", "batch"}
    demo.run(f"ebcloud login --server {DEMO_URL} --username member-algorithm")
    demo.run(POD_SUBMIT)
    assert assert_article_pod_bound().labels["pool"] == "train"
    created = demo.run("ebcloud pdb create -f examples/pods/nlp-pdb.yaml").stdout  # it guards the article's pod
    assert created.strip() == "poddisruptionbudget/algorithm/nlp-trainers created (1 disruption allowed now)"


@live
def test_the_articles_pool_file_imports_on_the_demo_page(demo, client):
    """The issue's first stumble: Pools -> Import YAML with examples/create-train-pool.yaml
    answered 400 on the demo, whose own pool already had the name. Now the page creates it."""
    client.force_login(get_user_model().objects.get(username="lead-algorithm"))
    with (ROOT / "examples" / "create-train-pool.yaml").open("rb") as upload:
        response = client.post("/pools/import/", {"upload": upload})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert GpuNodePool.objects.active().get(name="train-pool-a").team.slug == "algorithm"
