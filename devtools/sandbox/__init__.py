"""The sandbox: a local Kubernetes cluster that real clients (kubernetes-asyncio, ``kubectl``) can drive.

No kube-apiserver, kind, k3s or Docker engine can run on our machines, so tenon brings its own cluster. The
sandbox speaks the Kubernetes HTTP API closely enough that tenon's services and ``kubectl`` work against it
unchanged, and it *behaves* like a cluster: pods get scheduled, nodes boot, Cluster API machines appear.

Layers (each module one concept, pure logic apart from I/O):

``resources``
    The registry of served kinds (group, version, plural, kind, scope, subresources, short names, selectable
    fields). Everything else is driven from it: path parsing, discovery, OpenAPI, storage buckets. Each store
    owns a copy, which CustomResourceDefinitions change.
``selectors``, ``patching``, ``admission``
    Pure functions: label/field selector parsing and matching; merge, strategic-merge and JSON patch;
    defaulting and validation (so nothing a client cannot parse is ever stored).
``crds``, ``crd_registration``, ``structural``, ``cel_validation``, ``jsonpath``
    CustomResourceDefinitions as the kube-apiserver serves them: what a CRD defines and whether it may
    (``crds``), the store's CRD controllers (establish the kinds, delete the instances of a deleted CRD,
    ``crd_registration``), a version's structural schema (pruning, defaulting, validation with upstream's
    wording, ``structural``), its ``x-kubernetes-validations`` (CEL on ``common-expression-language``,
    ``cel_validation``) and the JSONPath of printer columns (``jsonpath``). ``tenon sandbox`` installs
    ``deploy/crds`` in the workload cluster at start; without CRDs the store serves schema-less stand-ins
    for Karpenter's and Cluster API's kinds.
``store``
    One cluster's state and the API semantics: global resourceVersion, optimistic concurrency (409),
    ``generateName``, status subresources, finalizers and ``deletionTimestamp``, graceful pod deletion, owner
    references with background garbage collection, binding, eviction with PodDisruptionBudgets, scale, and
    watches (per-kind event ring buffer, one asyncio queue per watcher, 410 when too old, bookmarks). It is
    synchronous except for watch iteration, so in-process controllers call it directly and cheaply.
``server``
    aiohttp translation of the REST API to store calls: list/watch streaming, discovery, a minimal OpenAPI v3
    for ``kubectl apply`` (with custom kinds' schemas, for ``kubectl explain``), ``fieldValidation`` and
    warnings, errors as ``kind: Status``.
``controllers`` and ``profiles``
    The simulated control plane (Deployment/ReplicaSet/DaemonSet/PDB controllers, kube-scheduler, kubelet,
    node lifecycle, Cluster API) running in-process against the stores, with delays from a timing profile
    (``fast`` for tests, ``field`` modelled on measured timelines).
``runtime``, ``kubeconfig``, ``testing``
    One process hosting a workload and a management cluster on two ports with two kubeconfigs
    (``tenon sandbox``), and ``running_sandbox()`` for tests.

``protobuf``
    Decoding of the protobuf bodies ``kubectl create namespace|deployment|pdb`` send (the rest is JSON).
``tables``
    Server-side printing (``meta.k8s.io/v1 Table``) so ``kubectl get`` shows the usual columns (pod STATUS
    and NODE, node Ready state, Machine PHASE; custom kinds by their CRD's printer columns).

What is deliberately left out: authentication and RBAC, protobuf beyond those three kinds, server-side
apply's field ownership (apply is approximated as a merge patch), schema conversion between API versions of
one kind (also for CRDs: no conversion webhooks), CEL cost limits and the CEL libraries
``common-expression-language`` lacks (see ``cel_validation``), pod logs/exec, and persistence (state lives
in memory).
"""
