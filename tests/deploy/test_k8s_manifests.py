"""The kustomize base in deploy/k8s: valid Kubernetes objects that agree with each
other and with the code (routes, Settings, Dockerfile, graceful shutdown)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from deploykit import K8S, check_settings_env, dockerfile, get_paths, package_version
from k8s_render import UnsupportedKustomization, image_name, render

from xla_costmodel.service.cli import GRACEFUL_SHUTDOWN_S

# The schemas kubernetes-validate ships offline. 1.31: the oldest minor release still
# in the main clouds' standard support when this was written; nothing in the base
# needs anything newer (autoscaling/v2 is GA since 1.23, policy/v1 since 1.21).
K8S_VERSION = "1.31.0"
Resource = dict[str, Any]


@pytest.fixture(scope="module")
def resources() -> list[Resource]:
    return render(K8S)


def operator_secrets() -> list[Resource]:
    """The Secrets ``create-secrets.sh`` creates, its random values made up here."""
    script = (K8S / "create-secrets.sh").read_text().replace("\\\n", " ")
    values = {"$db": "db-pw", "$admin": "admin-pw", "$cache": "redis-pw", "$seal": "k"}
    made = []
    for line in script.splitlines():
        found = re.search(r"create secret generic ([\w-]+)(.*)", line)
        if found is None:
            continue
        data = {}
        for key, value in re.findall(r'--from-literal=([\w-]+)="([^"]*)"', found[2]):
            for variable, fake in values.items():
                value = value.replace(variable, fake)
            data[key] = value
        made.append(
            {"kind": "Secret", "metadata": {"name": found[1]}, "stringData": data}
        )
    return made


def test_the_base_ships_no_secret_value(resources: list[Resource]) -> None:
    assert [r for r in resources if r["kind"] == "Secret"] == []
    for path in K8S.glob("*.yaml"):
        assert "change-me" not in path.read_text(), path
    # Every Secret key a pod reads, the script creates (optional ones aside).
    made = {
        (s["metadata"]["name"], k) for s in operator_secrets() for k in s["stringData"]
    }
    for workload in resources:
        if workload["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in pod_spec(workload)["containers"]:
            for var in container.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    assert (ref["name"], ref["key"]) in made, ref


def get(resources: list[Resource], kind: str, name: str) -> Resource:
    found = [
        r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(workload: Resource) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def server(resources: list[Resource]) -> dict[str, Any]:
    """The costmodel container of the costmodel Deployment."""
    (container,) = pod_spec(get(resources, "Deployment", "costmodel"))["containers"]
    return container  # type: ignore[no-any-return]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def workloads(resources: list[Resource]) -> list[Resource]:
    return [r for r in resources if r["kind"] in ("Deployment", "StatefulSet")]


def test_every_object_validates_strictly(resources: list[Resource]) -> None:
    errors = []
    for resource in resources:
        try:
            kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            errors.append(
                f"{resource['kind']}/{resource['metadata']['name']}: {where}: {exc.message}"
            )
    assert errors == []
    kinds = {r["kind"] for r in resources}
    assert kinds == {
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "StatefulSet",
        "NetworkPolicy",
    }


def test_strict_validation_rejects_a_misspelt_field(resources: list[Resource]) -> None:
    """The check above can fail: an unknown field is an error, not ignored."""
    deployment = copy.deepcopy(get(resources, "Deployment", "costmodel"))
    pod_spec(deployment)["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/"}}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest_and_renders_its_fields(
    resources: list[Resource],
) -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    for resource in resources:
        assert resource["metadata"]["namespace"] == "costmodel"
        assert (
            resource["metadata"]["labels"]["app.kubernetes.io/part-of"] == "costmodel"
        )
    # The image the Dockerfile builds, tagged with the package version.
    assert server(resources)["image"] == f"costmodel:{package_version()}"
    images = {
        c["image"] for w in workloads(resources) for c in pod_spec(w)["containers"]
    }
    assert images == {
        f"costmodel:{package_version()}",
        "redis:7-alpine",
        "postgres:16-alpine",
    }


def test_renderer_refuses_what_it_does_not_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "commonLabels: {a: b}\nresources: []\n"
    )
    with pytest.raises(UnsupportedKustomization, match="commonLabels"):
        render(tmp_path)
    assert (
        image_name("registry:5000/team/costmodel:0.2.0@sha256:ab")
        == "registry:5000/team/costmodel"
    )


def test_services_select_one_workload_on_a_port_it_exposes(
    resources: list[Resource],
) -> None:
    for service in [r for r in resources if r["kind"] == "Service"]:
        selector = service["spec"]["selector"]
        selected = [
            w
            for w in workloads(resources)
            if matches(selector, w["spec"]["template"]["metadata"]["labels"])
        ]
        assert len(selected) == 1, service["metadata"]["name"]
        ports = {
            p["name"]: p["containerPort"]
            for c in pod_spec(selected[0])["containers"]
            for p in c["ports"]
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (service["metadata"]["name"], port)
    # Workload selectors pick their own template (else the API server refuses them).
    for workload in workloads(resources):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert matches(workload["spec"]["selector"]["matchLabels"], labels)
    statefulset = get(resources, "StatefulSet", "postgres")
    governing = get(resources, "Service", statefulset["spec"]["serviceName"])
    assert governing["spec"]["clusterIP"] == "None"  # headless, as a StatefulSet needs


def test_hpa_and_pdb_cover_the_server_and_only_it(resources: list[Resource]) -> None:
    deployment = get(resources, "Deployment", "costmodel")
    hpa = get(resources, "HorizontalPodAutoscaler", "costmodel")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        "apps/v1",
        "Deployment",
        "costmodel",
    )
    # Several replicas share Redis and PostgreSQL; the HPA alone sets the count.
    assert hpa["spec"]["minReplicas"] >= 2
    assert "replicas" not in deployment["spec"]
    assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu"}
    assert "cpu" in server(resources)["resources"]["requests"]  # utilisation needs it

    pdb = get(resources, "PodDisruptionBudget", "costmodel")
    selector = pdb["spec"]["selector"]["matchLabels"]
    covered = [
        w["metadata"]["name"]
        for w in workloads(resources)
        if matches(selector, w["spec"]["template"]["metadata"]["labels"])
    ]
    assert covered == ["costmodel"]
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


def test_probes_hit_routes_the_app_serves_on_the_image_port(
    resources: list[Resource],
) -> None:
    container = server(resources)
    image = dockerfile()
    (port,) = container["ports"]
    assert port["containerPort"] == image.port == image.cmd_port
    paths = get_paths()
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes["livenessProbe"]["path"] == "/livez"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in probes.values():
        assert probe["path"] in paths
        assert probe["port"] in (port["name"], port["containerPort"])


def test_env_names_are_settings_fields_and_values_parse(  # noqa: PLR0915 -- one deployment's environment end to end, every assert on the same parsed settings
    resources: list[Resource], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The container's environment (image ENV, ConfigMap, Secret) read by Settings."""
    container = server(resources)
    resources = [*resources, *operator_secrets()]
    env = dict(dockerfile().env)
    for source in container["envFrom"]:
        env.update(get(resources, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in container["env"]:
        ref = var["valueFrom"]["secretKeyRef"]
        if ref.get("optional") and not any(
            r["kind"] == "Secret" and r["metadata"]["name"] == ref["name"]
            for r in resources
        ):
            continue  # the admin token: created by the operator, if at all
        env[var["name"]] = get(resources, "Secret", ref["name"])["stringData"][
            ref["key"]
        ]
    assert "COSTMODEL_DATABASE_URL" in env and "COSTMODEL_REDIS_URL" in env
    settings = check_settings_env(monkeypatch, env)
    stores, workers = settings.stores, settings.scoring.inference_workers

    # Both point at the Services of this base, on the ports they expose.
    assert stores.redis_url is not None and stores.database_url is not None
    redis = urlsplit(stores.redis_url.get_secret_value())
    assert redis.hostname == "redis"
    assert redis.port == get(resources, "Service", "redis")["spec"]["ports"][0]["port"]
    database = urlsplit(stores.database_url.get_secret_value())
    assert database.scheme.startswith("postgresql")  # not one SQLite file per pod
    assert database.hostname == "postgres"
    assert (
        database.port
        == get(resources, "Service", "postgres")["spec"]["ports"][0]["port"]
    )
    # ... as the role initdb.sh creates in the PostgreSQL container: not the
    # superuser, with its own password, owner of the database.
    postgres_set = get(resources, "StatefulSet", "postgres")
    (postgres,) = pod_spec(postgres_set)["containers"]
    pg_env = {v["name"]: v for v in postgres["env"]}

    def secret_of(var: str) -> str:
        ref = pg_env[var]["valueFrom"]["secretKeyRef"]
        return str(get(resources, "Secret", ref["name"])["stringData"][ref["key"]])

    assert database.username != pg_env["POSTGRES_USER"]["value"]
    assert database.password == secret_of("COSTMODEL_DB_PASSWORD")
    assert database.password != secret_of("POSTGRES_PASSWORD")
    init = get(resources, "ConfigMap", "costmodel-postgres-init")["data"]
    (script,) = init.values()
    assert script == (K8S.parent / "postgres" / "initdb.sh").read_text()
    role = re.search(r"CREATE ROLE (\w+) LOGIN ([A-Z ]+)", script)
    assert role is not None and role[1] == database.username
    assert "NOSUPERUSER" in role[2]
    assert f"CREATE DATABASE {database.path[1:]} OWNER {database.username}" in script
    (volume,) = pod_spec(postgres_set)["volumes"]
    assert volume["configMap"]["name"] == "costmodel-postgres-init"
    assert volume["configMap"]["defaultMode"] & 0o111  # run, not sourced
    assert {
        "name": "init",
        "mountPath": "/docker-entrypoint-initdb.d",
        "readOnly": True,
    } in postgres["volumeMounts"]
    assert stores.redis_hmac_key is not None  # Redis values are sealed
    # The pod's CPU limit bounds the inference threads (os.cpu_count() would not).
    assert workers == int(container["resources"]["limits"]["cpu"])
    # Pods listen on every interface: feedback needs a writer's token.
    auth = settings.feedback.feedback_auth
    assert auth == "token" and settings.feedback_tokens_required
    # Redis asks for the password the service's URL carries (the same Secret).
    (cache,) = pod_spec(get(resources, "Deployment", "redis"))["containers"]
    args = cache["args"]
    # No default user; the service's user, with the URL's password, has its keys
    # and channel only.
    assert args[args.index("--user") + 1 : args.index("--user") + 3] == [
        "default",
        "off",
    ]
    user = args.index(redis.username, args.index("--user") + 3)
    assert args[user + 1 : user + 3] == ["on", ">$(REDIS_PASSWORD)"]
    assert args[user + 3 : user + 5] == ["~costmodel:*", "&costmodel:*"]
    ref = {v["name"]: v for v in cache["env"]}["REDIS_PASSWORD"]["valueFrom"]
    key = ref["secretKeyRef"]
    redis_password = get(resources, "Secret", key["name"])["stringData"][key["key"]]
    assert redis.password == redis_password
    # One request's body, decoded arrays and float32 configs, times the requests
    # scoring at once, plus the measured base (MiB: deployment.yaml's comment,
    # with both caches full), stay under the memory limit.
    mib = 1 << 20
    limits, caches = settings.limits, settings.caches
    body = settings.requests.max_body_bytes
    per_request = body + limits.max_decoded_bytes + limits.max_scored_bytes
    base = 191 * mib + caches.memory_cache_bytes + caches.recent_rankings_bytes
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    assert base + workers * per_request <= int(limit[:-2]) << 30


def test_graceful_shutdown_fits_in_the_grace_period(resources: list[Resource]) -> None:
    """SIGKILL must not come before uvicorn has drained in-flight requests."""
    container = server(resources)
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = int(command[1])
    grace = pod_spec(get(resources, "Deployment", "costmodel"))[
        "terminationGracePeriodSeconds"
    ]
    # The margin covers the lifespan's shutdown (closing Redis and the database).
    assert grace >= pre_stop + GRACEFUL_SHUTDOWN_S + 5
    # A new pod is ready before an old one stops: a rollout never lowers capacity.
    strategy = get(resources, "Deployment", "costmodel")["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0


def test_server_runs_as_the_image_user_on_a_read_only_root(
    resources: list[Resource],
) -> None:
    image = dockerfile()
    pod = pod_spec(get(resources, "Deployment", "costmodel"))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == image.uid
    context = server(resources)["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    # Where the app may write (its data dir, tempfile's /tmp) is a writable volume.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {
        m["mountPath"]: volumes[m["name"]] for m in server(resources)["volumeMounts"]
    }
    for path in (image.env["COSTMODEL_DATA_DIR"], "/tmp"):
        assert "emptyDir" in mounts[path], path
    for workload in workloads(resources):
        assert pod_spec(workload)["automountServiceAccountToken"] is False
        assert pod_spec(workload)["securityContext"]["runAsNonRoot"] is True


def test_every_container_has_resources_and_probes(resources: list[Resource]) -> None:
    for workload in workloads(resources):
        for container in pod_spec(workload)["containers"]:
            limits = container["resources"]["limits"]
            requests = container["resources"]["requests"]
            assert "memory" in limits and "memory" in requests, container["name"]
            assert "readinessProbe" in container and "livenessProbe" in container
    # PostgreSQL keeps its data on a claim from the template; Redis keeps none.
    statefulset = get(resources, "StatefulSet", "postgres")
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    (postgres,) = pod_spec(statefulset)["containers"]
    assert claim["metadata"]["name"] in {m["name"] for m in postgres["volumeMounts"]}
    (redis,) = pod_spec(get(resources, "Deployment", "redis"))["containers"]
    assert redis["args"][redis["args"].index("--save") + 1] == ""
    assert redis["args"][redis["args"].index("--appendonly") + 1] == "no"


def test_only_the_server_reaches_redis_and_postgres(resources: list[Resource]) -> None:
    """Each workload has one NetworkPolicy; the stores admit the server's pods only,
    on the port their container names."""
    policies = [r for r in resources if r["kind"] == "NetworkPolicy"]
    server_labels = pod_labels(get(resources, "Deployment", "costmodel"))
    for workload in workloads(resources):
        labels = pod_labels(workload)
        (policy,) = [
            p
            for p in policies
            if matches(p["spec"]["podSelector"]["matchLabels"], labels)
        ]
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        (rule,) = policy["spec"]["ingress"]
        ports = {
            p["name"] for c in pod_spec(workload)["containers"] for p in c["ports"]
        }
        assert {p["port"] for p in rule["ports"]} <= ports
        if workload["metadata"]["name"] == "costmodel":
            assert "from" not in rule  # clients, wherever the cluster routes them
        else:
            (peer,) = rule["from"]
            assert matches(peer["podSelector"]["matchLabels"], server_labels)
            assert set(peer) == {"podSelector"}  # no other namespace, no IP block


def pod_labels(workload: Resource) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]  # type: ignore[no-any-return]
