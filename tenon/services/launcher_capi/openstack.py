"""OpenStack flavors as a source of capacity and prices for the Cluster API catalog.

The Cluster API launcher turns each karpenter-member MachineDeployment into one instance type, reading
capacity from the ``capacity.cluster-autoscaler.kubernetes.io/*`` annotations and the price from
``tenon.sh/price-per-hour`` (``tenon.core.catalog.instance_types_from_machine_deployments``). On OpenStack
those numbers already exist in Nova: every MachineDeployment boots one flavor, and the flavor states its
vCPUs, RAM and root disk. Writing them again by hand on every MachineDeployment is how they drift apart. So a
``ClusterAPINodeClass`` may name an OpenStack cloud (``spec.openstack``, see ``docs/openstack.md``); the
launcher then reads the flavors with openstacksdk and fills in what the annotations leave out, before the
catalog parser runs. Nova has no price API (only OVHcloud publishes a price catalog), so prices come from a
per-flavor table in the same NodeClass.

The module has three layers, and only the middle one does I/O:

1. **NodeClass -> settings** (pure): ``openstack_settings_from_nodeclass`` validates ``spec.openstack`` and
   returns an ``OpenStackSettings``, or raises ``NodeClassError`` naming the NodeClass and the field (for
   example ``ClusterAPINodeClass "default": spec.openstack.prices["m1.small"]: must be a non-negative
   number``). Credentials kept in Kubernetes Secrets are not read here: ``settings.secret_refs()`` lists the
   Secret keys the caller must fetch, and ``with_secrets(settings, values)`` (pure again) folds their contents
   in, validating a ``clouds.yaml`` taken from a Secret as it does so.
2. **settings -> flavors** (blocking I/O): ``read_flavors`` authenticates with Keystone, finds compute in the
   service catalog, lists ``/flavors/detail`` (paged, extra specs inline at microversion 2.61) and returns the
   enabled flavors by name. Every failure - a cloud missing from clouds.yaml, a refused password, an endpoint
   that does not answer within ``timeoutSeconds`` - becomes one ``OpenStackError`` whose message says which
   NodeClass, which endpoint and what to check. It blocks; async callers use ``load_flavors(settings,
   read_secret)``, which reads the Secrets through the caller's ``read_secret`` and runs ``read_flavors`` in a
   thread.
3. **flavors -> MachineDeployments** (pure): ``enrich_machine_deployments`` returns copies of the
   MachineDeployments with the missing ``cpu``, ``memory`` and ``ephemeral-disk`` capacity annotations and the
   missing price filled in, and notes saying what was filled from where. Annotations already on a
   MachineDeployment always win: the flavor is the default, the MachineDeployment the override, as in
   cluster-autoscaler, where annotations win over the infrastructure template's ``status.capacity``.

Which flavor a MachineDeployment boots is, in order: its ``tenon.sh/flavor`` annotation; else the
``node.kubernetes.io/instance-type`` entry of its ``capacity.cluster-autoscaler.kubernetes.io/labels``
annotation; else that label in ``spec.template.metadata.labels``; else its own name. (The two label steps are
where the catalog takes the instance type's name from, so a type and its flavor share the name.) (The flavor
is also written in the OpenStackMachineTemplate the MachineDeployment references, but reading that needs the
management cluster; the annotation is the explicit, cheap way to say it.) Units follow Nova and CAPO: ``ram``
is MiB, so memory is ``<ram>Mi``; ``disk`` is the root disk in GiB and becomes ``ephemeral-disk`` (kubelet's
ephemeral storage lives on the root filesystem). A boot-from-volume flavor has ``disk: 0``; then
``ephemeral-disk`` is left unset rather than claiming zero. Disabled flavors are left out: nothing can boot
them.
"""

from __future__ import annotations

import asyncio
import copy
import math
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import yaml

from tenon.core.wellknown import CAPACITY_PREFIX, FLAVOR, INSTANCE_TYPE, PRICE_PER_HOUR

# -- annotation and label keys -------------------------------------------------------------------------------

CPU_ANNOTATION = CAPACITY_PREFIX + "cpu"
MEMORY_ANNOTATION = CAPACITY_PREFIX + "memory"
EPHEMERAL_DISK_ANNOTATION = CAPACITY_PREFIX + "ephemeral-disk"
LABELS_ANNOTATION = CAPACITY_PREFIX + "labels"

NODECLASS_KIND = "ClusterAPINodeClass"
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_CLOUDS_YAML_KEY = "clouds.yaml"
DEFAULT_PASSWORD_KEY = "password"
DEFAULT_DOMAIN = "Default"


class NodeClassError(ValueError):
    """A ``ClusterAPINodeClass`` whose ``spec.openstack`` cannot be used; the message names NodeClass and
    field."""

    def __init__(self, nodeclass: str, field_path: str, problem: str) -> None:
        self.nodeclass = nodeclass
        self.field_path = field_path
        self.problem = problem
        super().__init__(f'{NODECLASS_KIND} "{nodeclass}": {field_path}: {problem}')


class OpenStackError(RuntimeError):
    """Reading flavors from OpenStack failed; the message says which NodeClass, which endpoint, what to
    check."""


# -- plain data ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    """The facts of one Nova flavor that a node's capacity follows from."""

    name: str
    vcpus: int
    ram_mib: int
    disk_gib: int
    extra_specs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SecretKeyRef:
    """One key of one Kubernetes Secret. NodeClasses are cluster-scoped, so the namespace is always
    explicit."""

    namespace: str
    name: str
    key: str

    def __str__(self) -> str:
        return f"Secret {self.namespace}/{self.name} key {self.key!r}"


@dataclass(frozen=True)
class OpenStackAuth:
    """Keystone v3 password credentials given field by field (``spec.openstack.auth``) instead of
    clouds.yaml."""

    auth_url: str
    username: str
    project_name: str | None
    project_id: str | None
    user_domain_name: str
    project_domain_name: str
    password_secret_ref: SecretKeyRef | None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class OpenStackSettings:
    """How to reach one NodeClass's cloud, and its price table. Built by
    ``openstack_settings_from_nodeclass``.

    Exactly one way to authenticate is set: ``cloud`` (a clouds.yaml entry, from ``clouds_yaml_path``, from a
    Secret via ``clouds_secret_ref``, or from openstacksdk's usual search path) or ``auth``.
    ``cloud_config`` holds the clouds.yaml entry once ``with_secrets`` has read it from the Secret.
    """

    nodeclass: str
    cloud: str | None
    clouds_yaml_path: str | None
    clouds_secret_ref: SecretKeyRef | None
    auth: OpenStackAuth | None
    region_name: str | None
    timeout_seconds: float
    prices: Mapping[str, float]
    cloud_config: Mapping[str, Any] | None = field(default=None, repr=False)

    def secret_refs(self) -> list[SecretKeyRef]:
        """The Secret keys the caller must read and pass to ``with_secrets`` before ``read_flavors``."""
        refs: list[SecretKeyRef] = []
        if self.clouds_secret_ref is not None and self.cloud_config is None:
            refs.append(self.clouds_secret_ref)
        if self.auth is not None and self.auth.password_secret_ref is not None and self.auth.password is None:
            refs.append(self.auth.password_secret_ref)
        return refs

    def describe_endpoint(self) -> str:
        """Where this NodeClass's credentials point, for messages (never includes a secret)."""
        if self.auth is not None:
            return f"auth_url {self.auth.auth_url}"
        if self.cloud_config is not None:
            auth_url = (self.cloud_config.get("auth") or {}).get("auth_url")
            return f"cloud {self.cloud!r} (auth_url {auth_url})" if auth_url else f"cloud {self.cloud!r}"
        where = self.clouds_yaml_path or "openstacksdk's clouds.yaml search path"
        return f"cloud {self.cloud!r} from {where}"


# -- layer 1: NodeClass -> settings (pure) -------------------------------------------------------------------

_FIELDS = {"cloud", "cloudsYAMLPath", "cloudsSecretRef", "auth", "regionName", "timeoutSeconds", "prices"}
_AUTH_FIELDS = {
    "authURL",
    "username",
    "password",
    "passwordSecretRef",
    "projectName",
    "projectID",
    "userDomainName",
    "projectDomainName",
}
_SECRET_REF_FIELDS = {"name", "namespace", "key"}
_PRICE = re.compile(r"^\s*[0-9]+(\.[0-9]+)?\s*$")


class _Fields:
    """Reads typed fields out of one mapping, raising NodeClassError with the full path on anything wrong."""

    def __init__(self, nodeclass: str, path: str, value: object, allowed: set[str]) -> None:
        self.nodeclass = nodeclass
        self.path = path
        if not isinstance(value, Mapping):
            raise NodeClassError(nodeclass, path, f"must be an object, got {type(value).__name__}")
        self.value: Mapping[str, Any] = value
        unknown = sorted(str(key) for key in set(value) - allowed)
        if unknown:
            raise NodeClassError(
                nodeclass, f"{path}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})"
            )

    def error(self, name: str, problem: str) -> NodeClassError:
        return NodeClassError(self.nodeclass, f"{self.path}.{name}", problem)

    def string(self, name: str, *, required: bool = False, default: str | None = None) -> str | None:
        raw = self.value.get(name)
        if raw is None:
            if required:
                raise self.error(name, "is required")
            return default
        if not isinstance(raw, str) or not raw.strip():
            raise self.error(name, f"must be a non-empty string, got {raw!r}")
        return raw.strip()

    def secret_ref(self, name: str, default_key: str) -> SecretKeyRef | None:
        raw = self.value.get(name)
        if raw is None:
            return None
        ref = _Fields(self.nodeclass, f"{self.path}.{name}", raw, _SECRET_REF_FIELDS)
        secret_name = ref.string("name", required=True)
        namespace = ref.string("namespace", required=True)
        key = ref.string("key", default=default_key)
        assert secret_name is not None and namespace is not None and key is not None
        return SecretKeyRef(namespace=namespace, name=secret_name, key=key)


def _nodeclass_name(nodeclass: object) -> str:
    if not isinstance(nodeclass, Mapping):
        raise NodeClassError("<unnamed>", "(document)", f"must be an object, got {type(nodeclass).__name__}")
    metadata = nodeclass.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise NodeClassError("<unnamed>", "metadata.name", "is required")
    kind = nodeclass.get("kind", NODECLASS_KIND)
    if kind != NODECLASS_KIND:
        raise NodeClassError(name, "kind", f"must be {NODECLASS_KIND}, got {kind!r}")
    return name


def _parse_prices(fields: _Fields) -> dict[str, float]:
    raw = fields.value.get("prices")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise fields.error(
            "prices", f"must be an object of flavor name to price per hour, got {type(raw).__name__}"
        )
    prices: dict[str, float] = {}
    for flavor, value in raw.items():
        where = f"prices[{flavor!r}]".replace("'", '"')
        if not isinstance(flavor, str) or not flavor.strip():
            raise fields.error(where, "flavor names must be non-empty strings")
        # Quoted strings are the Kubernetes convention for decimals; plain YAML numbers are accepted too.
        if isinstance(value, bool) or not (
            (isinstance(value, str) and _PRICE.match(value)) or isinstance(value, int | float)
        ):
            raise fields.error(
                where, f'must be a non-negative number per hour such as "0.096", got {value!r}'
            )
        price = float(value)
        if not math.isfinite(price) or price < 0:
            raise fields.error(
                where, f'must be a non-negative number per hour such as "0.096", got {value!r}'
            )
        prices[flavor] = price
    return prices


def _parse_auth(nodeclass: str, raw: object) -> OpenStackAuth:
    auth = _Fields(nodeclass, "spec.openstack.auth", raw, _AUTH_FIELDS)
    auth_url = auth.string("authURL", required=True)
    assert auth_url is not None
    if not re.match(r"^https?://[^/\s]+", auth_url):
        raise auth.error(
            "authURL", f"must be an http(s) URL such as https://keystone.example.com/v3, got {auth_url!r}"
        )
    username = auth.string("username", required=True)
    password = auth.value.get("password")  # not stripped: whitespace may be part of a password
    if password is not None and (not isinstance(password, str) or password == ""):
        raise auth.error("password", "must be a non-empty string")
    password_ref = auth.secret_ref("passwordSecretRef", DEFAULT_PASSWORD_KEY)
    if (password is None) == (password_ref is None):
        raise auth.error(
            "passwordSecretRef", "set exactly one of passwordSecretRef (recommended) and password"
        )
    project_name = auth.string("projectName")
    project_id = auth.string("projectID")
    if project_name is None and project_id is None:
        raise auth.error("projectName", "is required (or projectID): tokens must be scoped to a project")
    assert username is not None
    return OpenStackAuth(
        auth_url=auth_url,
        username=username,
        project_name=project_name,
        project_id=project_id,
        user_domain_name=auth.string("userDomainName", default=DEFAULT_DOMAIN) or DEFAULT_DOMAIN,
        project_domain_name=auth.string("projectDomainName", default=DEFAULT_DOMAIN) or DEFAULT_DOMAIN,
        password_secret_ref=password_ref,
        password=password,
    )


def openstack_settings_from_nodeclass(nodeclass: dict[str, Any]) -> OpenStackSettings | None:
    """Validate ``spec.openstack`` of a ClusterAPINodeClass; None when the NodeClass names no OpenStack cloud.

    Raises ``NodeClassError`` naming the NodeClass and the field for anything missing, mistyped or unknown.
    """
    name = _nodeclass_name(nodeclass)
    spec = nodeclass.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise NodeClassError(name, "spec", f"must be an object, got {type(spec).__name__}")
    raw = spec.get("openstack")
    if raw is None:
        return None
    fields = _Fields(name, "spec.openstack", raw, _FIELDS)

    cloud = fields.string("cloud")
    clouds_yaml_path = fields.string("cloudsYAMLPath")
    clouds_secret_ref = fields.secret_ref("cloudsSecretRef", DEFAULT_CLOUDS_YAML_KEY)
    auth = _parse_auth(name, fields.value["auth"]) if fields.value.get("auth") is not None else None
    if auth is not None and cloud is not None:
        raise fields.error("auth", "set either cloud (an entry in clouds.yaml) or auth, not both")
    if auth is None and cloud is None:
        raise fields.error("cloud", "is required: name the clouds.yaml entry, or give auth instead")
    if clouds_yaml_path is not None and clouds_secret_ref is not None:
        raise fields.error("cloudsSecretRef", "set either cloudsYAMLPath or cloudsSecretRef, not both")
    if auth is not None and (clouds_yaml_path is not None or clouds_secret_ref is not None):
        which = "cloudsYAMLPath" if clouds_yaml_path is not None else "cloudsSecretRef"
        raise fields.error(which, "only applies with cloud; it cannot be combined with auth")

    timeout_raw = fields.value.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    if (
        isinstance(timeout_raw, bool)
        or not isinstance(timeout_raw, int | float)
        or not 0 < timeout_raw <= 300
    ):
        raise fields.error("timeoutSeconds", f"must be a number of seconds in (0, 300], got {timeout_raw!r}")

    return OpenStackSettings(
        nodeclass=name,
        cloud=cloud,
        clouds_yaml_path=clouds_yaml_path,
        clouds_secret_ref=clouds_secret_ref,
        auth=auth,
        region_name=fields.string("regionName"),
        timeout_seconds=float(timeout_raw),
        prices=_parse_prices(fields),
    )


def with_secrets(settings: OpenStackSettings, values: Mapping[SecretKeyRef, str]) -> OpenStackSettings:
    """Fold the contents of the Secret keys listed by ``settings.secret_refs()`` into the settings (pure).

    ``values`` maps each reference to the decoded text of that Secret key; a reference missing from it means
    the caller could not find the Secret or key, reported as a NodeClassError on the field that names it.
    """
    result = settings
    if settings.clouds_secret_ref is not None and settings.cloud_config is None:
        ref = settings.clouds_secret_ref
        field_path = "spec.openstack.cloudsSecretRef"
        if ref not in values:
            raise NodeClassError(settings.nodeclass, field_path, f"{ref} not found")
        try:
            document = yaml.safe_load(values[ref])
        except yaml.YAMLError as exc:
            raise NodeClassError(settings.nodeclass, field_path, f"{ref} is not valid YAML: {exc}") from exc
        clouds = document.get("clouds") if isinstance(document, Mapping) else None
        if not isinstance(clouds, Mapping):
            raise NodeClassError(settings.nodeclass, field_path, f"{ref} has no top-level 'clouds' mapping")
        entry = clouds.get(settings.cloud)
        if not isinstance(entry, Mapping):
            known = ", ".join(sorted(str(c) for c in clouds)) or "none"
            raise NodeClassError(
                settings.nodeclass,
                "spec.openstack.cloud",
                f"cloud {settings.cloud!r} is not in the clouds.yaml of {ref} (clouds there: {known})",
            )
        result = replace(result, cloud_config=copy.deepcopy(dict(entry)))
    auth = settings.auth
    if auth is not None and auth.password is None and auth.password_secret_ref is not None:
        ref = auth.password_secret_ref
        if ref not in values or not values[ref]:
            raise NodeClassError(
                settings.nodeclass, "spec.openstack.auth.passwordSecretRef", f"{ref} not found or empty"
            )
        # `kubectl create secret --from-file` keeps the file's final newline; no password ends in one.
        result = replace(result, auth=replace(auth, password=values[ref].rstrip("\n")))
    return result


# -- layer 2: settings -> flavors (blocking I/O) -------------------------------------------------------------
# openstacksdk is imported inside these functions: importing it takes about 0.35 s, which the pure layers (and
# `tenon simulate`, which validates NodeClasses) should not pay.


def _cloud_region(settings: OpenStackSettings) -> Any:
    """Build openstacksdk's CloudRegion for the settings, loading clouds.yaml only when that is the source."""
    from openstack.config import loader

    common: dict[str, Any] = {"api_timeout": settings.timeout_seconds}
    if settings.region_name is not None:
        common["region_name"] = settings.region_name
    if settings.auth is not None:
        auth = settings.auth
        auth_args: dict[str, Any] = {
            "auth_url": auth.auth_url,
            "username": auth.username,
            "password": auth.password,
            "user_domain_name": auth.user_domain_name,
            "project_domain_name": auth.project_domain_name,
        }
        if auth.project_id is not None:
            auth_args["project_id"] = auth.project_id
        else:
            auth_args["project_name"] = auth.project_name
        config = loader.OpenStackConfig(load_yaml_config=False, load_envvars=False)
        return config.get_one(auth_type="password", auth=auth_args, **common)
    if settings.cloud_config is not None:
        entry = copy.deepcopy(dict(settings.cloud_config))
        entry.update(common)
        config = loader.OpenStackConfig(load_yaml_config=False, load_envvars=False)
        return config.get_one(**entry)
    if settings.clouds_yaml_path is not None:
        # An explicit file is the only file: OS_CLIENT_CONFIG_FILE and the usual search path do not apply.
        config = loader.OpenStackConfig(config_files=[settings.clouds_yaml_path], load_envvars=False)
    else:
        config = loader.OpenStackConfig()
    return config.get_one(cloud=settings.cloud, **common)


def _explain(settings: OpenStackSettings, exc: Exception) -> str:
    """Turn an openstacksdk/keystoneauth exception into a message an operator can act on."""
    from keystoneauth1 import exceptions as ks

    where = f'{NODECLASS_KIND} "{settings.nodeclass}": OpenStack {settings.describe_endpoint()}'
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = str(exc)
    if isinstance(exc, ks.Unauthorized) or getattr(exc, "status_code", None) == 401:
        return (
            f"{where}: Keystone refused the credentials (HTTP 401); check username, password, project and "
            f"domains: {detail}"
        )
    if isinstance(exc, ks.ConnectTimeout) or "timed out" in text:
        return f"{where}: no answer within {settings.timeout_seconds:g} s: {detail}"
    if isinstance(exc, ks.ConnectFailure | ks.DiscoveryFailure) and (
        "connection" in text.lower() or "refused" in text.lower()
    ):
        return f"{where}: cannot connect (is the endpoint reachable and the URL right?): {detail}"
    if isinstance(exc, ks.EndpointNotFound) or "EndpointNotFound" in type(exc).__name__:
        return f"{where}: no compute endpoint in the service catalog for this region: {detail}"
    if getattr(exc, "status_code", None) == 403:
        return f"{where}: the project may not list flavors (HTTP 403): {detail}"
    return f"{where}: {type(exc).__name__}: {detail}"


def _flavor_from_resource(resource: Any) -> Flavor:
    specs = resource.extra_specs or {}
    return Flavor(
        name=str(resource.name),
        vcpus=int(resource.vcpus or 0),
        ram_mib=int(resource.ram or 0),
        disk_gib=int(resource.disk or 0),
        extra_specs={str(k): str(v) for k, v in specs.items()},
    )


def read_flavors(settings: OpenStackSettings) -> dict[str, Flavor]:
    """List the cloud's enabled flavors by name (blocking; run it in a thread from async code).

    Raises ``OpenStackError`` with a message naming the NodeClass and endpoint on any failure: secrets not yet
    resolved, clouds.yaml problems, refused credentials, unreachable or silent endpoints, API errors.
    """
    from keystoneauth1 import exceptions as ks
    from openstack import connection
    from openstack import exceptions as sdk
    from requests import exceptions as http

    unresolved = settings.secret_refs()
    if unresolved:
        raise OpenStackError(
            f'{NODECLASS_KIND} "{settings.nodeclass}": {unresolved[0]} has not been read yet; '
            "pass the Secret contents through with_secrets() before read_flavors()"
        )
    if settings.clouds_yaml_path is not None and not os.path.isfile(settings.clouds_yaml_path):
        raise OpenStackError(
            f'{NODECLASS_KIND} "{settings.nodeclass}": spec.openstack.cloudsYAMLPath: '
            f"{settings.clouds_yaml_path} is not a file the launcher can read"
        )
    try:
        conn = connection.Connection(config=_cloud_region(settings))
        try:
            flavors: dict[str, Flavor] = {}
            # Extra specs come inline from microversion 2.61 (Nova since Stein). get_extra_specs=True would
            # add one request per flavor whose specs are empty, on every catalog refresh; older clouds just
            # show {}.
            for resource in conn.compute.flavors(details=True, get_extra_specs=False):
                if resource.is_disabled:
                    continue
                flavor = _flavor_from_resource(resource)
                flavors.setdefault(flavor.name, flavor)
            return flavors
        finally:
            conn.close()
    except sdk.ConfigException as exc:
        raise OpenStackError(
            f'{NODECLASS_KIND} "{settings.nodeclass}": OpenStack {settings.describe_endpoint()}: {exc}'
        ) from exc
    except (ks.ClientException, sdk.SDKException, http.RequestException) as exc:
        raise OpenStackError(_explain(settings, exc)) from exc
    except (yaml.YAMLError, OSError, ValueError, TypeError, KeyError) as exc:
        # A malformed clouds.yaml (a string where a mapping belongs, say) surfaces as one of these.
        raise OpenStackError(
            f'{NODECLASS_KIND} "{settings.nodeclass}": OpenStack {settings.describe_endpoint()}: '
            f"unusable configuration: {type(exc).__name__}: {exc}"
        ) from exc


SecretReader = Callable[[SecretKeyRef], Awaitable[str | None]]


async def load_flavors(settings: OpenStackSettings, read_secret: SecretReader) -> dict[str, Flavor]:
    """Resolve the settings' Secrets with ``read_secret`` (None = not found), then ``read_flavors`` in a
    thread.

    The launcher's one call: ``read_secret`` is its Kubernetes client (decoded text of one Secret key), so
    this module stays free of Kubernetes I/O. Raises NodeClassError for missing Secrets, OpenStackError
    otherwise.
    """
    values: dict[SecretKeyRef, str] = {}
    for ref in settings.secret_refs():
        value = await read_secret(ref)
        if value is not None:
            values[ref] = value
    resolved = with_secrets(settings, values)
    return await asyncio.to_thread(read_flavors, resolved)


# -- layer 3: flavors -> MachineDeployments (pure) -----------------------------------------------------------


def _labels_annotation(value: str) -> dict[str, str]:
    """Parse ``k=v,k=v`` leniently: the catalog parser reports malformed entries, this only looks for one
    key."""
    labels: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if sep:
            labels[key.strip()] = val.strip()
    return labels


def flavor_name_for(md: Mapping[str, Any]) -> tuple[str | None, str]:
    """Which flavor a MachineDeployment boots, and where that was read (for notes); None when unknowable."""
    raw_metadata = md.get("metadata")
    metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, Mapping) else {}
    raw_annotations = metadata.get("annotations")
    annotations: Mapping[str, Any] = raw_annotations if isinstance(raw_annotations, Mapping) else {}
    explicit = annotations.get(FLAVOR)
    if isinstance(explicit, str) and explicit.strip():
        return explicit.strip(), f"annotation {FLAVOR}"
    labels = annotations.get(LABELS_ANNOTATION)
    if isinstance(labels, str):
        instance_type = _labels_annotation(labels).get(INSTANCE_TYPE)
        if instance_type:
            return instance_type, f"{INSTANCE_TYPE} in annotation {LABELS_ANNOTATION}"
    # The catalog names the instance type after this label too, so the flavor and the type name agree.
    spec = md.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    template_metadata = template.get("metadata") if isinstance(template, Mapping) else None
    template_labels = template_metadata.get("labels") if isinstance(template_metadata, Mapping) else None
    if isinstance(template_labels, Mapping):
        instance_type = template_labels.get(INSTANCE_TYPE)
        if isinstance(instance_type, str) and instance_type.strip():
            return instance_type.strip(), f"label {INSTANCE_TYPE} in spec.template.metadata.labels"
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name, "the MachineDeployment's name"
    return None, "nowhere"


def _format_price(price: float) -> str:
    """Plain decimal notation (never ``1e-05``), shortest form that round-trips."""
    text = format(Decimal(repr(price)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _parse_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _present(annotations: Mapping[str, Any], key: str) -> bool:
    value = annotations.get(key)
    return isinstance(value, str) and value.strip() != ""


@dataclass
class _Filled:
    """What enriching one MachineDeployment did, for its note."""

    from_flavor: list[str] = field(default_factory=list)
    from_table: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def note(self, label: str, flavor_name: str | None, source: str) -> str:
        parts: list[str] = []
        if self.from_flavor:
            what = ", ".join(self.from_flavor)
            parts.append(f"filled {what} from OpenStack flavor {flavor_name!r} (named by {source})")
        if self.from_table:
            parts.append(
                f"filled {', '.join(self.from_table)} from the NodeClass price table entry {flavor_name!r}"
            )
        if self.kept:
            parts.append(f"kept its own {', '.join(self.kept)}")
        if self.missing:
            parts.append("not filled: " + "; ".join(self.missing))
        return f"{label}: " + "; ".join(parts)


def _writable_annotations(md: Any, index: int) -> tuple[str, dict[str, Any]] | str:
    """The MD's label and its annotations (created if absent), or the note saying why it is left as is."""
    if not isinstance(md, dict) or not isinstance(md.get("metadata", {}), dict):
        return f"MachineDeployment #{index}: not an object with metadata; left as is"
    metadata = md.setdefault("metadata", {})
    label = f"MachineDeployment {metadata.get('namespace', 'default')}/{metadata.get('name', f'#{index}')}"
    annotations = metadata.get("annotations")
    if annotations is None:
        annotations = metadata["annotations"] = {}
    if not isinstance(annotations, dict):
        return f"{label}: metadata.annotations is not an object; left as is"
    return label, annotations


def _fill_capacity(annotations: dict[str, Any], flavor: Flavor, filled: _Filled) -> None:
    facts = {
        CPU_ANNOTATION: str(flavor.vcpus) if flavor.vcpus > 0 else None,
        MEMORY_ANNOTATION: f"{flavor.ram_mib}Mi" if flavor.ram_mib > 0 else None,
        EPHEMERAL_DISK_ANNOTATION: f"{flavor.disk_gib}Gi" if flavor.disk_gib > 0 else None,
    }
    for key, value in facts.items():
        short = key.removeprefix(CAPACITY_PREFIX)
        if _present(annotations, key):
            filled.kept.append(f"{short}={annotations[key].strip()}")
        elif value is None:
            why = "root disk 0 GiB: boot from volume" if key == EPHEMERAL_DISK_ANNOTATION else "0"
            filled.missing.append(f"{short}: flavor {flavor.name!r} says {why}")
        else:
            annotations[key] = value
            filled.from_flavor.append(f"{short}={value}")


def _fill_price(
    annotations: dict[str, Any], price: float | None, flavor_name: str | None, filled: _Filled
) -> None:
    if _present(annotations, PRICE_PER_HOUR):
        own = annotations[PRICE_PER_HOUR].strip()
        extra = ""
        if price is not None and _parse_float(own) != price:
            extra = f" (the NodeClass price table says {_format_price(price)})"
        filled.kept.append(f"price-per-hour={own}{extra}")
    elif price is None:
        filled.missing.append(f"price: the NodeClass price table has no entry for {flavor_name!r}")
    else:
        annotations[PRICE_PER_HOUR] = _format_price(price)
        filled.from_table.append(f"price-per-hour={annotations[PRICE_PER_HOUR]}")


def enrich_machine_deployments(
    mds: list[dict[str, Any]], flavors: dict[str, Flavor], prices: dict[str, float]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Fill the capacity and price annotations a MachineDeployment omits from its flavor and the price table.

    Returns deep copies of all ``mds`` (in order; the inputs are not changed) and one note per
    MachineDeployment saying what was filled from where, what was kept, and what could not be filled.
    Annotations already present (non-empty) always win. A MachineDeployment that is not an object is passed
    through untouched with a note; the catalog parser skips it with its own event.
    """
    enriched: list[dict[str, Any]] = []
    notes: list[str] = []
    for index, original in enumerate(mds):
        md = copy.deepcopy(original)
        enriched.append(md)
        found = _writable_annotations(md, index)
        if isinstance(found, str):
            notes.append(found)
            continue
        label, annotations = found
        flavor_name, source = flavor_name_for(md)
        flavor = flavors.get(flavor_name) if flavor_name is not None else None
        filled = _Filled()
        if flavor is None:
            filled.missing.append(f"capacity: no OpenStack flavor {flavor_name!r} (named by {source})")
        else:
            _fill_capacity(annotations, flavor, filled)
        price = prices.get(flavor_name) if flavor_name is not None else None
        _fill_price(annotations, price, flavor_name, filled)
        notes.append(filled.note(label, flavor_name, source))
    return enriched, notes
