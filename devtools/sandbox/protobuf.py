"""Decoding the Kubernetes protobuf bodies kubectl's ``create`` generators send.

Almost every client talks JSON to the sandbox, but ``kubectl create namespace``, ``kubectl create deployment``
and ``kubectl create poddisruptionbudget`` build typed objects and POST them as
``application/vnd.kubernetes.protobuf`` (verified with kubectl v1.32). Those are exactly the commands a person
trying tenon types first (``kubectl create deployment web --image=nginx --replicas=8``), so the sandbox
decodes them rather than failing.

Format: the 4-byte magic ``k8s\\0`` followed by a ``runtime.Unknown`` message (``typeMeta`` = 1 with
``apiVersion`` = 1 and ``kind`` = 2, ``raw`` = 2 holding the object's own message). Messages are decoded with
a small schema per type (field number -> JSON name and type) taken from ``k8s.io/api``'s ``generated.proto``;
only the types those generators emit are described. A field the schema does not know is an error naming the
message and field number (415), never silently dropped: the user is told to send the object as JSON
(``kubectl apply -f``) instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Union

from devtools.sandbox.errors import BadRequest, UnsupportedMediaType

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A field type: a scalar name, a nested schema (message), or a (container, element) pair.
FieldType = Union[str, "Schema", tuple[str, Any]]
Schema = dict[int, tuple[str, Any]]

TIME: Schema = {1: ("seconds", "int"), 2: ("nanos", "int")}  # decoded specially into RFC 3339
QUANTITY: Schema = {1: ("string", "string")}  # decoded specially into its string
INT_OR_STRING: Schema = {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "string")}

OWNER_REFERENCE: Schema = {
    1: ("kind", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
OBJECT_META: Schema = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
    4: ("selfLink", "string"),
    5: ("uid", "string"),
    6: ("resourceVersion", "string"),
    7: ("generation", "int"),
    8: ("creationTimestamp", TIME),
    9: ("deletionTimestamp", TIME),
    10: ("deletionGracePeriodSeconds", "int"),
    11: ("labels", ("map", "string")),
    12: ("annotations", ("map", "string")),
    13: ("ownerReferences", ("list", OWNER_REFERENCE)),
    14: ("finalizers", ("list", "string")),
}
LABEL_SELECTOR_REQUIREMENT: Schema = {
    1: ("key", "string"),
    2: ("operator", "string"),
    3: ("values", ("list", "string")),
}
LABEL_SELECTOR: Schema = {
    1: ("matchLabels", ("map", "string")),
    2: ("matchExpressions", ("list", LABEL_SELECTOR_REQUIREMENT)),
}
CONTAINER_PORT: Schema = {
    1: ("name", "string"),
    2: ("hostPort", "int"),
    3: ("containerPort", "int0"),
    4: ("protocol", "string"),
    5: ("hostIP", "string"),
}
ENV_VAR: Schema = {1: ("name", "string"), 2: ("value", "string")}
RESOURCES: Schema = {1: ("limits", ("map", QUANTITY)), 2: ("requests", ("map", QUANTITY))}
CONTAINER: Schema = {
    1: ("name", "string"),
    2: ("image", "string"),
    3: ("command", ("list", "string")),
    4: ("args", ("list", "string")),
    5: ("workingDir", "string"),
    6: ("ports", ("list", CONTAINER_PORT)),
    7: ("env", ("list", ENV_VAR)),
    8: ("resources", RESOURCES),
    13: ("terminationMessagePath", "string"),
    14: ("imagePullPolicy", "string"),
    16: ("stdin", "bool"),
    17: ("stdinOnce", "bool"),
    18: ("tty", "bool"),
    20: ("terminationMessagePolicy", "string"),
}
POD_SPEC: Schema = {
    2: ("containers", ("list", CONTAINER)),
    3: ("restartPolicy", "string"),
    4: ("terminationGracePeriodSeconds", "int0"),
    5: ("activeDeadlineSeconds", "int0"),
    6: ("dnsPolicy", "string"),
    7: ("nodeSelector", ("map", "string")),
    8: ("serviceAccountName", "string"),
    9: ("serviceAccount", "string"),
    10: ("nodeName", "string"),
    11: ("hostNetwork", "bool"),
    12: ("hostPID", "bool"),
    13: ("hostIPC", "bool"),
    16: ("hostname", "string"),
    17: ("subdomain", "string"),
    19: ("schedulerName", "string"),
    20: ("initContainers", ("list", CONTAINER)),
    24: ("priorityClassName", "string"),
}
POD_TEMPLATE_SPEC: Schema = {1: ("metadata", OBJECT_META), 2: ("spec", POD_SPEC)}
ROLLING_UPDATE_DEPLOYMENT: Schema = {1: ("maxUnavailable", INT_OR_STRING), 2: ("maxSurge", INT_OR_STRING)}
DEPLOYMENT_STRATEGY: Schema = {1: ("type", "string"), 2: ("rollingUpdate", ROLLING_UPDATE_DEPLOYMENT)}
DEPLOYMENT_SPEC: Schema = {
    1: ("replicas", "int0"),
    2: ("selector", LABEL_SELECTOR),
    3: ("template", POD_TEMPLATE_SPEC),
    4: ("strategy", DEPLOYMENT_STRATEGY),
    5: ("minReadySeconds", "int"),
    6: ("revisionHistoryLimit", "int0"),
    7: ("paused", "bool"),
    9: ("progressDeadlineSeconds", "int0"),
}
# The server owns .status on create; whatever a client encodes there is skipped, not decoded.
IGNORED: Schema = {}
NAMESPACE_SPEC: Schema = {1: ("finalizers", ("list", "string"))}
PDB_SPEC: Schema = {
    1: ("minAvailable", INT_OR_STRING),
    2: ("selector", LABEL_SELECTOR),
    3: ("maxUnavailable", INT_OR_STRING),
    4: ("unhealthyPodEvictionPolicy", "string"),
}

# kind -> top-level schema
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {1: ("metadata", OBJECT_META), 2: ("spec", NAMESPACE_SPEC), 3: ("status", IGNORED)},
    ("apps/v1", "Deployment"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", DEPLOYMENT_SPEC),
        3: ("status", IGNORED),
    },
    ("policy/v1", "PodDisruptionBudget"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", PDB_SPEC),
        3: ("status", IGNORED),
    },
}
UNKNOWN: Schema = {
    1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}),
    2: ("raw", "bytes"),
    3: ("contentEncoding", "string"),
    4: ("contentType", "string"),
}


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == PROTOBUF


# --- wire format --------------------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise BadRequest("protobuf body is truncated (varint)")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise BadRequest("protobuf body is malformed (varint too long)")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) in order; length-delimited values are bytes."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise BadRequest("protobuf body is truncated (length-delimited field)")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise BadRequest(f"protobuf body uses unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _scalar(kind: str, wire: int, value: Any, where: str) -> Any:
    if kind == "string":
        if wire != 2:
            raise BadRequest(f"protobuf {where}: expected a string")
        return bytes(value).decode("utf-8")
    if kind == "bytes":
        return bytes(value)
    if kind == "bool":
        return bool(value)
    if kind in ("int", "int0"):
        if wire != 0:
            raise BadRequest(f"protobuf {where}: expected an integer")
        return value - (1 << 64) if value >= 1 << 63 else value
    raise BadRequest(f"protobuf {where}: unknown field type {kind}")


def _convert(kind: Any, wire: int, value: Any, where: str) -> Any:
    if kind is IGNORED:
        return None
    if isinstance(kind, dict):
        if wire != 2:
            raise BadRequest(f"protobuf {where}: expected a message")
        decoded = decode_message(bytes(value), kind, where)
        if kind is TIME:
            seconds = int(decoded.get("seconds", 0))
            return (
                None if seconds == 0 else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            )
        if kind is QUANTITY:
            return decoded.get("string", "0")
        if kind is INT_OR_STRING:
            return decoded.get("strVal", "") if decoded.get("type") == 1 else decoded.get("intVal", 0)
        return decoded
    return _scalar(kind, wire, value, where)


def decode_message(data: bytes, schema: Schema, where: str = "object") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        entry = schema.get(number)
        if entry is None:
            raise UnsupportedMediaType(
                f"protobuf field {number} of {where} is not supported by the tenon sandbox; send this object "
                "as JSON instead (for example kubectl apply -f manifest.yaml)"
            )
        name, kind = entry
        path = f"{where}.{name}"
        if isinstance(kind, tuple) and kind[0] == "list":
            out.setdefault(name, []).append(_convert(kind[1], wire, value, path))
        elif isinstance(kind, tuple) and kind[0] == "map":
            item = decode_message(bytes(value), {1: ("key", "string"), 2: ("value", kind[1])}, path)
            out.setdefault(name, {})[item.get("key", "")] = item.get("value", "")
        else:
            converted = _convert(kind, wire, value, path)
            # Go encodes every non-pointer scalar, set or not; JSON would omit them (omitempty). Keep zero
            # only for the pointer fields where 0 means something ("int0": replicas, grace periods, ...).
            if converted is None or (
                converted in ("", False, 0) and kind != "int0" and not isinstance(kind, dict)
            ):
                continue
            out[name] = converted
    return out


def decode_object(body: bytes) -> dict[str, Any]:
    """A Kubernetes protobuf request body -> the equivalent JSON object (``apiVersion``/``kind`` set)."""
    if not body.startswith(MAGIC):
        raise BadRequest("protobuf body lacks the k8s\\0 prefix")
    envelope = decode_message(body[len(MAGIC) :], UNKNOWN, "runtime.Unknown")
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise UnsupportedMediaType(
            f"the tenon sandbox accepts protobuf only for {', '.join(k for _, k in KINDS)}; "
            f"send {kind or 'this'} as JSON instead (for example kubectl apply -f manifest.yaml)"
        )
    obj = decode_message(envelope.get("raw", b""), schema, kind)
    return {"apiVersion": api_version, "kind": kind, **obj}
