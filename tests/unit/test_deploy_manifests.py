"""deploy/kubernetes: the cluster deployment, checked without a cluster.

There is no Kubernetes cluster or `helm` on our machines. These tests parse every YAML file
under deploy/kubernetes, validate the standard resources against Kubernetes' own schemas
(kubernetes-validate bundles them; no network), check the Helm values against the keys of
Dagster's chart, and hold the invariants the deployment depends on: pinned images, probes,
autoscaling and disruption budget, three PostgreSQL instances whose read-only service feeds the
searches, secrets by reference only, and only variable names the product reads.
"""

from __future__ import annotations

import re
import tomllib
import urllib.parse
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from kb_core.settings import VARIABLES, Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
HELM_VALUES = DEPLOY / "dagster-values.yaml"
DEPLOYMENT_PAGE = REPO / "docs" / "deployment.md"
DEPLOYMENT_SECTION = "## When one machine is not enough"
KUBERNETES_VERSION = "1.33.0"

QUERY_DEPLOYMENT = "kb-query"
APP_IMAGE = "registry.example.com/kb/app"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# A version tag: at least major.minor (18.1-standard-trixie, 1.13.27, 0.1.0); never `latest`.
VERSION_TAG = re.compile(r"^v?\d+\.\d+")

# What these manifests use but do not create: CloudNativePG creates kb-db-app; the operator
# creates the others before applying (docs/deployment.md, "When one machine is not enough").
EXTERNAL = {
    "Secret": {"kb-db-app", "kb-providers", "dagster-postgresql-secret"},
    "PersistentVolumeClaim": {"kb-docs"},
}
# Read by libpq beneath psycopg and psycopg2, not by our code: the database password, for
# URLs that carry none.
LIBPQ_VARIABLES = {"PGPASSWORD"}
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
SECRET_LOOKING = [
    re.compile(r"://[^/@\s:]+:[^/@\s]+@"),  # a URL with a password
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\b(?:sk-(?:ant-)?[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\."),  # a JWT
]

# Keys of Dagster's Helm chart (helm/dagster/values.yaml and its schema, helm/dagster/schema,
# read 2026-12-01) under the sections these values set; `None`: any structure below.
CHART_KEYS: dict[str, Any] = {
    "global": {"postgresqlSecretName": None, "dagsterHome": None, "serviceAccountName": None,
               "celeryConfigSecretName": None},
    "generatePostgresqlPasswordSecret": None,
    "postgresql": {"enabled": None, "postgresqlHost": None, "postgresqlUsername": None,
                   "postgresqlPassword": None, "postgresqlDatabase": None,
                   "postgresqlParams": None, "postgresqlScheme": None, "image": None,
                   "service": {"port": None}},
    "busybox": {"image": None},
    "dagsterWebserver": {"replicaCount": None, "image": None, "service": None, "env": None,
                         "envConfigMaps": None, "envSecrets": None, "resources": None,
                         "workspace": None, "nodeSelector": None, "affinity": None,
                         "tolerations": None, "readinessProbe": None},
    "dagsterDaemon": {"enabled": None, "image": None, "resources": None, "env": None,
                      "envConfigMaps": None, "envSecrets": None, "heartbeatTolerance": None,
                      "runMonitoring": {"enabled": None, "startTimeoutSeconds": None,
                                        "cancelTimeoutSeconds": None,
                                        "maxResumeRunAttempts": None,
                                        "pollIntervalSeconds": None,
                                        "maxRuntimeSeconds": None},
                      "runCoordinator": {
                          "enabled": None, "type": None,
                          "config": {"queuedRunCoordinator": {
                              "maxConcurrentRuns": None, "tagConcurrencyLimits": None,
                              "dequeueIntervalSeconds": None, "dequeueNumWorkers": None,
                              "dequeueUseThreads": None,
                              "blockOpConcurrencyLimitedRuns": None}}}},
    "concurrency": {"enabled": None,
                    "pools": {"defaultLimit": None, "granularity": None,
                              "opGranularityRunBuffer": None},
                    "runs": {"maxConcurrentRuns": None, "tagConcurrencyLimits": None}},
    "runLauncher": {"type": None, "config": {"k8sRunLauncher": {
        "image": None, "imagePullPolicy": None, "jobNamespace": None,
        "loadInclusterConfig": None, "kubeconfigFile": None, "envConfigMaps": None,
        "envSecrets": None, "envVars": None, "volumeMounts": None, "volumes": None,
        "labels": None, "failPodOnRunFailure": None, "resources": None,
        "runK8sConfig": None}}},
    "telemetry": {"enabled": None},
    "dagster-user-deployments": {"enabled": None, "enableSubchart": None,
                                 "imagePullSecrets": None, "deployments": None},
}
USER_DEPLOYMENT_KEYS = {
    "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns",
    "deploymentNamespace", "port", "env", "envConfigMaps", "envSecrets", "annotations",
    "nodeSelector", "affinity", "tolerations", "podSecurityContext", "securityContext",
    "resources", "livenessProbe", "readinessProbe", "startupProbe", "labels", "volumeMounts",
    "volumes", "schedulerName", "initContainers", "sidecarContainers", "service",
}


# --- loading ---------------------------------------------------------------------------


def _yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])


@cache
def _documents() -> tuple[tuple[Path, dict[str, Any]], ...]:
    """Every YAML document under deploy/kubernetes, with its file."""
    docs = []
    for path in _yaml_files():
        with path.open(encoding="utf-8") as f:
            docs += [(path, doc) for doc in yaml.safe_load_all(f) if doc is not None]
    return tuple(docs)


def _manifests() -> list[dict[str, Any]]:
    return [doc for path, doc in _documents() if path != HELM_VALUES]


@cache
def _values() -> dict[str, Any]:
    return yaml.safe_load(HELM_VALUES.read_text(encoding="utf-8"))


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [m for m in _manifests()
             if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _cluster() -> dict[str, Any]:
    return _one("Cluster")


def _user_deployment() -> dict[str, Any]:
    deployments = _values()["dagster-user-deployments"]["deployments"]
    assert len(deployments) == 1, "one code location: kb_pipeline"
    return deployments[0]


def _workloads() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every workload manifest."""
    for m in _manifests():
        if m["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield m["metadata"]["name"], m["spec"]["template"]["spec"]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _config_map_data(name: str) -> dict[str, str]:
    return _one("ConfigMap", name)["data"]


def _environment(env: list[dict[str, Any]], config_maps: list[str]) -> dict[str, dict]:
    """Variable name -> its EnvVar (a ConfigMap's entries as {"value": ...}); a container's
    own env wins over envFrom, as in Kubernetes."""
    resolved: dict[str, dict] = {}
    for name in config_maps:
        resolved |= {k: {"name": k, "value": v} for k, v in _config_map_data(name).items()}
    return resolved | {e["name"]: e for e in env}


def _container_environment(container: dict[str, Any]) -> dict[str, dict]:
    maps = [s["configMapRef"]["name"] for s in container.get("envFrom", []) if "configMapRef" in s]
    return _environment(container.get("env", []), maps)


def _code_location_environment() -> dict[str, dict]:
    deployment = _user_deployment()
    return _environment(deployment.get("env", []),
                        [c["name"] for c in deployment.get("envConfigMaps", [])])


def _every_environment() -> Iterator[tuple[str, dict[str, dict]]]:
    for workload, pod in _workloads():
        for container in _containers(pod):
            yield f"{workload}/{container['name']}", _container_environment(container)
    yield "dagster code location", _code_location_environment()


def _strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, value) of every string (keys included) in a YAML tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}/{key}", str(key)
            yield from _strings(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


# --- files and schemas ---------------------------------------------------------------------


def test_every_file_parses_and_every_manifest_is_a_named_resource():
    assert {p.name for p in _yaml_files()} >= {
        "postgres.yaml", "settings.yaml", "query-service.yaml", "embedding-servers.yaml",
        "dagster-values.yaml",
    }
    seen = set()
    for path, doc in _documents():
        if path == HELM_VALUES:
            assert "kind" not in doc, "the Helm values are values, not a manifest"
            continue
        assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{path.name}: {doc}"
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{key} defined twice"
        assert "namespace" not in doc["metadata"], f"{key}: the namespace is `kubectl -n`'s"
        seen.add(key)


def test_standard_resources_pass_kubernetes_own_schemas():
    import kubernetes_validate  # the test extra's; its schemas ship in the wheel

    checked = 0
    for manifest in _manifests():
        if "." in manifest["apiVersion"].split("/")[0]:
            continue  # a custom resource (postgresql.cnpg.io): checked by the tests below
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= 6


def test_helm_values_use_only_keys_of_dagsters_chart():
    def check(values: dict[str, Any], allowed: dict[str, Any], where: str) -> None:
        for key, value in values.items():
            assert key in allowed, f"{where}{key} is not a key of the chart"
            if allowed[key] is not None and isinstance(value, dict):
                check(value, allowed[key], f"{where}{key}.")

    check(_values(), CHART_KEYS, "")
    assert set(_user_deployment()) <= USER_DEPLOYMENT_KEYS


# --- images ------------------------------------------------------------------------------


def _images() -> Iterator[tuple[str, str, str]]:
    """(where, repository, tag or @digest) of every image the manifests and values name."""
    for workload, pod in _workloads():
        for container in _containers(pod):
            image = container["image"]
            repository, _, tag = image.rpartition("@") if "@" in image else image.rpartition(":")
            yield workload, repository, ("@" + tag if "@" in image else tag)
    image = _cluster()["spec"]["imageName"]
    yield "Cluster", *image.rsplit(":", 1)

    def helm_images(node: Any, path: str) -> Iterator[tuple[str, str, str]]:
        if isinstance(node, dict):
            if isinstance(node.get("image"), dict):
                yield path, node["image"]["repository"], str(node["image"]["tag"])
            for key, value in node.items():
                yield from helm_images(value, f"{path}.{key}")
        elif isinstance(node, list):
            for item in node:
                yield from helm_images(item, path)

    yield from helm_images(_values(), "values")


def test_every_image_is_pinned_by_an_exact_version_tag_or_a_digest():
    images = list(_images())
    assert len(images) >= 7
    for where, repository, tag in images:
        assert repository and "/" in repository, f"{where}: name the registry: {repository}"
        if tag.startswith("@"):
            assert DIGEST.match(tag), f"{where}: {tag}"
        else:
            assert tag != "latest" and VERSION_TAG.match(tag), f"{where}: {repository}:{tag}"


def test_our_image_is_the_project_version_everywhere():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    ours = [(where, tag) for where, repository, tag in _images() if repository == APP_IMAGE]
    places = {where.split(".deployments")[0] for where, _ in ours}
    assert places >= {QUERY_DEPLOYMENT, "kb-embed", "values.dagster-user-deployments"}
    assert {tag for _, tag in ours} == {version}


def test_the_app_image_can_carry_dagster_k8s_in_lockstep_with_dagster_postgres():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = dict(d.split("==") for d in project["dependencies"] if "==" in d)
    assert project["optional-dependencies"]["k8s"] == [f"dagster-k8s=={pins['dagster-postgres']}"]
    dockerfile = (REPO / "docker" / "app" / "Dockerfile").read_text()
    assert 'ARG KB_EXTRAS=""' in dockerfile and "optional-dependencies" in dockerfile
    assert "KB_EXTRAS=k8s" in DEPLOYMENT_PAGE.read_text(encoding="utf-8")


# --- the query service ------------------------------------------------------------------


def _query() -> dict[str, Any]:
    return _one("Deployment", QUERY_DEPLOYMENT)


def _query_container() -> dict[str, Any]:
    containers = _query()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_query_service_runs_kb_serve_ready_on_readyz_alive_on_healthz():
    container = _query_container()
    command = [*container.get("command", []), *container.get("args", [])]
    assert command == ["kb", "serve", "--host", "0.0.0.0", "--port", "8000"]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert get["port"] in ("http", 8000) and port["http"] == 8000, probe
    assert container["resources"]["requests"]["cpu"], "the autoscaler's utilization needs it"


def test_autoscaler_scales_the_query_deployment_from_two_replicas():
    hpa = _one("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        "apps/v1", "Deployment", QUERY_DEPLOYMENT)
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    assert hpa["spec"]["metrics"]
    assert _query()["spec"]["replicas"] >= hpa["spec"]["minReplicas"]


def test_disruption_budget_selects_the_query_pods_and_lets_a_drain_proceed():
    pdb = _one("PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    selector = pdb["spec"]["selector"]["matchLabels"]
    labels = _query()["spec"]["template"]["metadata"]["labels"]
    assert selector and selector.items() <= labels.items()
    assert selector == _query()["spec"]["selector"]["matchLabels"]
    budget = {"minAvailable", "maxUnavailable"} & set(pdb["spec"])
    assert len(budget) == 1
    if "minAvailable" in budget:
        # Below the autoscaler's floor, or no pod could ever be evicted.
        assert pdb["spec"]["minAvailable"] < _one("HorizontalPodAutoscaler")["spec"]["minReplicas"]
    service = _one("Service", QUERY_DEPLOYMENT)
    assert service["spec"]["selector"] == selector


# --- PostgreSQL -------------------------------------------------------------------------


def _url_host(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""


def test_postgres_is_a_primary_and_two_replicas_of_an_image_with_pgvector():
    cluster = _cluster()
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    assert cluster["spec"]["instances"] == 3
    # CloudNativePG's standard images ship pgvector; its minimal ones do not.
    assert "-standard-" in cluster["spec"]["imageName"].rsplit(":", 1)[1]
    assert cluster["spec"]["storage"]["size"]


def test_every_extension_the_migrations_create_is_created_at_bootstrap_by_the_superuser():
    created = {m.lower() for p in (REPO / "sql").glob("*.sql")
               for m in re.findall(r"CREATE EXTENSION IF NOT EXISTS (\w+)", p.read_text(), re.I)}
    assert "vector" in created
    bootstrap = " ".join(_cluster()["spec"]["bootstrap"]["initdb"]["postInitApplicationSQL"])
    for extension in created:
        assert f"CREATE EXTENSION IF NOT EXISTS {extension}" in bootstrap, extension


def test_searches_read_the_ro_service_and_everything_else_writes_the_rw_service():
    name = _cluster()["metadata"]["name"]
    initdb = _cluster()["spec"]["bootstrap"]["initdb"]
    for where, env in _every_environment():
        if "KB_DATABASE_URL" not in env:
            continue
        url = env["KB_DATABASE_URL"]["value"]
        assert _url_host(url) == f"{name}-rw", where
        parts = urllib.parse.urlsplit(url)
        assert (parts.username, parts.path) == (initdb["owner"], f"/{initdb['database']}"), where
        reads = [u for u in env["KB_DATABASE_READ_URLS"]["value"].split(",") if u.strip()]
        assert reads and {_url_host(u) for u in reads} == {f"{name}-ro"}, where
        password = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
        assert (password["name"], password["key"]) == (f"{name}-app", "password"), where
    assert "KB_DATABASE_URL" in dict(_every_environment())["dagster code location"]
    assert "KB_DATABASE_URL" in _container_environment(_query_container())


def test_dagster_storage_is_its_own_database_on_the_primary_through_psycopg2():
    values = _values()["postgresql"]
    database = _one("Database")
    assert values["enabled"] is False
    assert values["postgresqlHost"] == f"{_cluster()['metadata']['name']}-rw"
    assert values["postgresqlScheme"] == "postgresql+psycopg2"  # docs/architecture.md
    assert database["spec"]["cluster"]["name"] == _cluster()["metadata"]["name"]
    assert values["postgresqlDatabase"] == database["spec"]["name"] != "kb"
    owner = _cluster()["spec"]["bootstrap"]["initdb"]["owner"]
    assert values["postgresqlUsername"] == database["spec"]["owner"] == owner


# --- Dagster ----------------------------------------------------------------------------


def test_dagster_launches_runs_as_jobs_through_a_bounded_run_queue():
    values = _values()
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["enabled"] is True and coordinator["type"] == "QueuedRunCoordinator"
    queued = coordinator["config"]["queuedRunCoordinator"].get("maxConcurrentRuns")
    runs = values.get("concurrency", {}).get("runs", {}).get("maxConcurrentRuns")
    # The chart refuses both at once.
    assert (queued is None) != (runs is None)
    assert (queued or runs) > 0


def test_the_code_location_is_the_app_image_loading_what_workspace_yaml_loads():
    deployment = _user_deployment()
    assert _values()["dagster-user-deployments"]["enabled"] is True
    assert deployment["image"]["repository"] == APP_IMAGE
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"][0]
    module = workspace["python_module"]
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("--module-name") + 1] == module["module_name"]
    assert args[args.index("--attribute") + 1] == module["attribute"]
    # Runs get the code location's settings, secrets and the documents' volume.
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True
    mounts = {m["mountPath"]: m for m in deployment["volumeMounts"]}
    docs = _code_location_environment()["KB_DOCS_DIRS"]["value"].split(":")
    for folder in docs:
        assert folder in mounts and mounts[folder]["readOnly"] is True, folder


def test_the_embedding_pool_limit_is_kb_embed_steps_and_the_pool_lists_every_server():
    env = _code_location_environment()
    concurrency = _values()["concurrency"]
    assert concurrency["enabled"] is True
    assert concurrency["pools"]["defaultLimit"] == int(env["KB_EMBED_STEPS"]["value"])
    servers = _one("StatefulSet", "kb-embed")
    port = servers["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    service = _one("Service", servers["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None", "a headless service names each pod"
    expected = [f"http://{servers['metadata']['name']}-{i}.{service['metadata']['name']}:{port}"
                for i in range(servers["spec"]["replicas"])]
    assert env["KB_EMBED_URLS"]["value"].split(",") == expected


def test_dagster_accepts_the_instance_these_values_render(tmp_path):
    """The run queue and pool limits as the chart writes them into dagster.yaml
    (templates/helpers/instance), read back by Dagster's own instance code."""
    from dagster._core.instance.config import ConcurrencyConfig
    from dagster._core.instance.ref import InstanceRef
    from dagster._core.run_coordinator import QueuedRunCoordinator

    values = _values()
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    coordinator: dict[str, Any] = {"module": "dagster.core.run_coordinator",
                                   "class": "QueuedRunCoordinator"}
    if queued.get("maxConcurrentRuns") is not None:
        coordinator["config"] = {"max_concurrent_runs": queued["maxConcurrentRuns"]}
    concurrency: dict[str, Any] = {}
    pools = values["concurrency"].get("pools", {})
    if pools.get("defaultLimit") is not None:
        concurrency["pools"] = {"default_limit": pools["defaultLimit"]}
    runs = values["concurrency"].get("runs", {})
    if runs.get("maxConcurrentRuns") is not None:
        concurrency["runs"] = {"max_concurrent_runs": runs["maxConcurrentRuns"]}
    instance = {"run_coordinator": coordinator, "concurrency": concurrency}
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance))

    ref = InstanceRef.from_dir(str(tmp_path))
    assert isinstance(ref.run_coordinator, QueuedRunCoordinator)
    effective = ConcurrencyConfig.from_concurrency_settings(
        ref.settings.get("concurrency", {}), ref.run_coordinator.get_run_queue_config()
    )
    assert effective.run_queue_config.max_concurrent_runs == (
        queued.get("maxConcurrentRuns") or runs.get("maxConcurrentRuns"))
    assert effective.pool_config.default_pool_limit == pools["defaultLimit"]


# --- settings and secrets -----------------------------------------------------------------


def test_every_variable_set_is_one_the_product_reads():
    known = {v.name for v in VARIABLES} | LIBPQ_VARIABLES
    for where, env in _every_environment():
        unknown = set(env) - known
        assert not unknown, f"{where} sets {sorted(unknown)}, which nothing reads"


def test_every_pod_environment_is_a_configuration_the_product_accepts():
    for where, env in _every_environment():
        if not env:
            continue  # kb-embed's server reads no setting of ours
        # A secret's value is unknown here; any non-empty text stands in for it.
        environ = {name: var.get("value", "from-a-secret") for name, var in env.items()}
        settings = Settings.from_env(environ)
        assert settings.database_url == environ["KB_DATABASE_URL"], where
    service = Settings.from_env(
        {n: v.get("value", "x") for n, v in _container_environment(_query_container()).items()}
    ).service
    assert service.oidc_client_id and service.public_url.startswith("https://")


def test_secrets_are_referenced_never_written():
    assert not [m for m in _manifests() if m["kind"] == "Secret"], "secrets are made by hand"
    for path, doc in _documents():
        for where, text in _strings(doc):
            for pattern in SECRET_LOOKING:
                assert not pattern.search(text), f"{path.name}{where} looks like a secret"
    for where, env in _every_environment():
        for name, var in env.items():
            if SECRET_NAME.search(name):
                assert "secretKeyRef" in var.get("valueFrom", {}), f"{where}: {name}"
            value = var.get("value", "")
            parts = urllib.parse.urlsplit(value) if "://" in value else None
            assert not (parts and parts.password), f"{where}: {name} carries a password"
    # envFrom secretRef and the chart's envSecrets would hide which variables they set.
    for workload, pod in _workloads():
        for container in _containers(pod):
            assert all("secretRef" not in s for s in container.get("envFrom", [])), workload
    assert not _user_deployment().get("envSecrets")
    for name in _config_map_data("kb-settings"):
        assert not SECRET_NAME.search(name), name
    values = _values()
    assert values["generatePostgresqlPasswordSecret"] is False
    assert "postgresqlPassword" not in values["postgresql"]


def test_what_the_manifests_reference_exists_or_the_docs_say_who_makes_it():
    defined = {(m["kind"], m["metadata"]["name"]) for m in _manifests()}
    page = DEPLOYMENT_PAGE.read_text(encoding="utf-8")
    assert DEPLOYMENT_SECTION in page
    section = page.split(DEPLOYMENT_SECTION, 1)[1].split("\n## ", 1)[0]
    refs: set[tuple[str, str]] = set()
    for _, doc in _documents():
        refs |= set(_references(doc))
    refs.add(("Secret", _values()["global"]["postgresqlSecretName"]))
    for kind, name in refs:
        if (kind, name) in defined:
            continue
        assert name in EXTERNAL.get(kind, set()), f"{kind} {name} is neither defined nor known"
        assert f"`{name}`" in section, f"the deployment page does not say who makes {kind} {name}"
    for path in _yaml_files():
        assert f"{path.name}" in section, f"the deployment page does not mention {path.name}"


def _references(node: Any) -> Iterator[tuple[str, str]]:
    """(kind, name) of every ConfigMap, Secret and claim a YAML tree refers to."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("secretKeyRef", "secretRef") and isinstance(value, dict):
                yield "Secret", value["name"]
            elif key in ("configMapRef", "configMapKeyRef") and isinstance(value, dict):
                yield "ConfigMap", value["name"]
            elif key == "envConfigMaps":
                yield from (("ConfigMap", c["name"]) for c in value)
            elif key == "persistentVolumeClaim":
                yield "PersistentVolumeClaim", value["claimName"]
            yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)
