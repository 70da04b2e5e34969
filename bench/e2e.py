"""The whole system end to end: provisioning 1,000 pods, and scale to zero from 500 empty nodes (issues 5, 6).

Both measurements run on :class:`devtools.stack.LocalStack` with the sandbox's ``fast`` timing profile: a real
``nats-server``, the sandbox (workload + management clusters) and every service as its own process, exactly
what ``tenon up`` runs. Each gets a fresh stack, so one cannot warm or slow the other.

Provisioning (issue 5)
    The demo infrastructure (NodePool, ClusterAPINodeClass, MachineDeployments c3-4/c3-8/c3-16, the 100m
    DaemonSet) with the limits lifted for the size (NodePool ``limits.cpu`` and each MachineDeployment's
    max-size annotation), then ``D`` Deployments of ``P`` pods with varied requests (250m-2 CPU, 256Mi-2Gi),
    all created at once, until every pod is Running. Figures:

    * ``all_running_s``: from the first Deployment's create to every pod observed Running;
    * ``last_unschedulable_to_all_planned_s``: from the moment the *last* pod became Unschedulable to the
      ``recorded_at`` of the last ``NodeClaimPlanned`` in the log. The moment a pod became Unschedulable is
      when this process's pod watch first sees ``PodScheduled=False/Unschedulable`` on it (the condition's
      ``lastTransitionTime`` only has second precision; the watch lags the transition by milliseconds, which
      makes the figure a hair *shorter* than the truth, never longer by more than that lag). Target: the
      batch window (1 s idle) + 250 ms;
    * the per-hop latency of the event chain, per claim, from the log's ``recorded_at`` times:
      ``PendingBatch -> Planned`` (the batch found through the claim's ``causationId``),
      ``Planned -> Launched``, ``Launched -> Registered``, ``Registered -> Initialized``; p50/p99/max. The
      ``fast`` profile's own waits sit inside some hops (machine providerID 0.15 s after it is created, the
      Node 0.05 s later, Ready 0.1 s after that) and are reported beside them, so the share of tenon is
      visible;
    * ``sandbox_waits``: the first of those waits as it was on the run (``Machine seen -> providerID``, from
      the launcher's ``MachineObserved`` records; :func:`provider_id_waits`), since a busy sandbox may take
      longer than its profile says. The hop targets still count the profile's wait, not this one;
    * ``timeline_s``: for each step (the pods' first Unschedulable, each lifecycle event of the claims, the
      pods' first Running) its first, median and last moment in seconds after the first create: where the
      hops say how long each step took, this says where the whole run's seconds went;
    * nodes, claims, price per hour; cluster-autoscaler's published bound is printed for reference (30 s
      worst case, about 5 s on average, for clusters under 100 nodes).

Scale to zero (issue 6)
    A NodePool with ``disruption.budgets: [{nodes: "10%"}]``; ``N`` pods of a c3-4-sized request (1500m) with
    required pod anti-affinity on ``kubernetes.io/hostname`` give ``N`` nodes, one pod each. Once every pod
    runs, the NodePool's ``consolidateAfter`` is lowered to 1 s (not before: a node that waits a moment for
    its pod would otherwise be empty long enough to go) and the Deployment is deleted. Figures: the time
    from the delete to no Node left (observed by polling) and to the last ``NodeClaimTerminated`` (log), and
    the **peak number of claims being disrupted at once**: a claim is being disrupted from its
    ``DisruptionRequested`` to its ``NodeClaimTerminated`` (log times), and the peak is the maximum overlap
    of those intervals. The budget it is checked against is computed from the log alone, independently of
    the disruption service: at each ``DisruptionRequested``, ``ceil(10% x claims alive at the latest
    DisruptionDecision)`` (alive = planned and not yet terminated). Every moment the overlap exceeds that is a
    violation; the target is none. Karpenter needed about 3 minutes in the field to return an empty pool to
    zero.

Measured on this 2-core machine (2026-12-02, about a minute for the suite; six runs at 3a7ff7a and 310077d)
    Provisioning: 1,000 pods on 159 claims, all Running in 4.82-5.87 s, under 5 s in two runs of six (target
    5 s; 5.6-6.6 s earlier the same day, 14.4 s in November). The first wave is planned 1.09-1.12 s after the
    last pod went Unschedulable, and no claim is bought for a pod placed otherwise (nominations).
    ``PendingBatch -> Planned`` p99 69-94 ms, ``Planned -> Launched`` p99 0.93-1.52 s, ``Launched ->
    Registered`` p99 1.48-2.21 s, ``Registered -> Initialized`` p50 9-31 ms, p99 1.23-1.73 s. The timeline
    says where the time goes: pods Unschedulable by 0.3-0.5 s, planned at 1.4-1.6 s, Launched by 2.4-3.1 s,
    Registered by 3.7-4.6 s, Running by 4.7-5.8 s; from the first node joining to the last pod Running the
    sandbox's one thread is busy in every sample, and the two cores are ~90 % busy (the sandbox ~0.65 of one,
    tenon's services ~1.1). Scale to zero: 500 one-pod nodes gone 13.5-17.5 s after the delete, the budget
    never exceeded and kept 93.5-94.8 % full since a DaemonSet's pod no longer restarts its node's
    consolidateAfter wait (89-94 % before). What moved the figures that day: the collector paced for a server
    in every process (1,000 pod status patches in the sandbox: 0.76 -> 0.40 CPU s), and the pod-watcher
    reading each pod change once. About one run in ten, pods of claims not yet registered take the slack of a
    registered Node and leave a planned pod without room: it is planned again once its Node has been
    initialized for 1.5 s (all Running in ~7 s then; 20-22 s before that rule).

Three runs at 04d8a98 (2026-12-02, later that day), after the deciders' consumers ack a batch at once
    All Running in 5.09-5.33 s; every claim planned 1.09-1.16 s after the last Unschedulable, none for a
    displaced pod; ``Planned -> Launched`` p99 0.87-1.19 s, ``Launched -> Registered`` p99 1.82-1.96 s,
    ``Registered -> Initialized`` p99 1.30-1.47 s. CPU during provisioning: disruption 0.65-0.69 s (0.8-0.93
    before the cumulative acks), the scheduler 1.12-1.29 s (1.26-1.46), the sandbox 2.8-3.0 s. Scale to zero
    in 13.0-15.5 s, the budget never exceeded and 93-95 % full. The scheduler registers the Nodes that joined
    while its last batch was being carried out (nominations and Node patches, 0.5-1.1 s at the peak, bound by
    the sandbox's thread) only once that batch is done: that wait is most of both registration hops.

Six runs at 14977ad (2026-12-02, the next session), after a bound pod is published when it is bound, ends
or starts terminating (not when it starts running), deciders fetch 1,024 records at once, the registration
patch no longer puts back a taint removed meanwhile, and the sandbox's scheduler wakes pending pods only
for Nodes whose taints they tolerate
    All Running in 3.80-4.31 s (4.33-4.56 s at 04d8a98 the same morning); every claim planned 1.08-1.13 s
    after the last Unschedulable, none for a displaced pod; ``Planned -> Launched`` p99 0.48-0.76 s,
    ``Launched -> Registered`` p99 1.24-1.81 s (p50 1.0-1.4 s), ``Registered -> Initialized`` p99
    0.03-1.06 s. Half the pod events (1,150 instead of 2,300), so less for every reader: CPU during
    provisioning, disruption 0.34-0.44 s, the scheduler 0.70-0.93 s, the pod-watcher 0.63-0.81 s, the sandbox
    2.0-2.35 s. Scale to zero in 10.3-13.5 s, the budget never exceeded and 93.8-95.1 % full.
    ``Launched -> Registered`` is what is left over its target (1.05 s). Its time is the registrations'
    requests (six nominations and a Node patch per claim, about 1,300 in all) waiting on the sandbox's one
    thread while it also binds and starts the pods of the Nodes already registered; the two cores are busy
    throughout (sandbox 0.7-0.8, tenon's services 0.8-1.0). Carrying out the registrations of the next
    batch while the previous one's are under way was tried (every Node's registration started within
    0.1 s of its observation): p99 1.43-1.50 s, the same requests queued at the same thread.

Where ``Launched -> Registered`` goes (2026-12-02, a later session; six runs at 541da2c on a slower day:
all Running 4.06-5.56 s, that hop's p99 1.33-2.41 s)
    The Node is in the log before its claim is launched (NodeObserved 0.04-0.23 s earlier, median), so the
    hop is the registration's carry-out. Timed in the scheduler in one run: the first Node's registration
    alone took 0.42 s (the sandbox busy with the launch wave), and the 130 Nodes that joined meanwhile were
    registered in one batch of 1.26 s: nominations p50 0.40 s (p90 0.75 s), then the Node patch p50 0.12 s
    (p90 0.65 s, queued behind the other claims' nominations), the append 0.014 s; the few Nodes that joined
    during that batch waited for it, and they are the p99. Folding between batches took 10-23 ms. The
    sandbox's thread, timed by kind in one run: its scheduler 0.77 s (1,939 failed tries; 1,806
    Unschedulable messages rewritten), the kubelet 0.35 s, pod watch fan-out 0.33 s, the Cluster API
    controller 0.30 s; tenon's own requests 0.43 s of it (1,000 nominations 0.14 s, 159 NodeClaim creates
    0.12 s). Tried and measured, none moved the hop beyond the noise: the API server served ahead of the
    sandbox's controllers (interleaved with the baseline: p99 2.02-2.32 s against 1.33-1.78 s), 400
    connections per client instead of 100, 2 ms controller slices instead of 5, rewrites of an Unschedulable
    message at most every 2 s (1,806 -> 644 rewrites); nominating alongside the Node patch instead of before
    it displaced 5-7 claims a run.

What the sandbox's event loop does meanwhile (2026-12-02, the session after; a machine that spent 1.5-2 times
the CPU seconds on the same run: the sandbox 3.3-5.2 s, the scheduler 1.2-2.4 s, the pod-watcher 1.3-2.1 s;
all Running in 5.6-9.9 s, ``Launched -> Registered`` p99 2.3-3.9 s)
    A probe task timing the sandbox loop's turns: under 0.1 ms each before and after the wave, 35-55 ms
    (p90 up to 90 ms) from the first registration to the last, every controller taking its 5 ms slice and
    every request its handler's time in each turn. A request waits a turn to be read and another to be
    answered, and a registration is two round trips (the nominations, then the Node patch), so one
    registration alone took 0.34-0.50 s while ~100 Nodes joined. Tried again and worse, with the
    measurement above: carrying out each claim's registration and initialization apart from the consumer
    (per-claim lanes, FIFO, at most 8 or unbounded in flight), the scheduler's CPU doubled (1.5 -> 3.0 s:
    a decision per small batch) and ``Launched -> Registered`` p50 rose to 1.9-2.2 s; the sandbox at nice -15
    (its requests waited on the starved services instead: p50 2.1-2.3 s); NodeClaim objects written 3 s
    after a change instead of 0.5 s (no change beyond the noise in two runs each). What was cut for every
    process instead, measured on its own: the scheduler no longer lists a batch's pod keys once per claim
    it explains (0.97 -> 0.26 ms per claim of a 2,500-pod batch), the pod-watcher's ``karpenter_pods_state``
    is a dict of label tuples rendered at scrape time (29 us per change before), the sandbox's informers no
    longer arm a deadline per queued event (9 us each) and its timestamps are formatted once per second
    (3.3 us each before).

Where the CPU goes on a saturated machine (2026-12-03; a machine slower still: 1.66-1.79 s for a
ten-million-step Python loop, 1.19 s the evening before)
    Sampled from ``/proc`` every 0.25 s, the two cores are busy throughout the wave (1.7-1.9 of 2.0: the
    sandbox 0.6-0.75, the scheduler 0.3-0.45, the pod-watcher 0.2-0.35, the launcher 0.15-0.4, disruption
    0.2, nats-server 0.1-0.17), so every hop is bound by what the whole stack spends. The nominations are the
    largest share of tenon's requests (1,000 of 1,950): without them (measured, not kept) ``Launched ->
    Registered`` p99 fell to 1.1-1.3 s, but 7-10 claims a run were bought for displaced pods and all Running
    took 7.6-9.1 s against 5.8-6.3 s with them. Cut instead, each measured on its own: the kube client's
    request path skips ``ApiClient.call_api`` (458 -> 275-363 us of client CPU per request), the consumers
    fetch with one pull request and a callback subscription instead of nats-py's ``fetch``, which created a
    task, a ``wait_for`` and a uuid per message (100 -> 40 us per message), and the sandbox's controllers
    copy objects with msgspec (a Machine 82 -> 12 us). Three runs at 0e1606c against three at 3379ffc the
    same morning: all Running 5.8-6.9 s (8.4-8.7 s), ``Planned -> Launched`` p99 0.9-1.5 s (2.2-3.0 s),
    ``Launched -> Registered`` p99 2.2-2.6 s (2.7-3.9 s), ``Registered -> Initialized`` p99 0.8-1.1 s
    (1.2-2.1 s); CPU during provisioning 7.5-8.9 s (11.3-12.1 s): the scheduler 1.3-1.6 (2.1-2.4), the
    pod-watcher 1.4-1.6 (1.8-1.9), disruption 0.65-0.75 (1.1-1.2), the launcher 0.64-0.77 (0.94-1.06), the
    sandbox 3.4-4.2 (4.8-5.2); scale to zero 16.6-20.7 s (21-23 s), never over the budget, 93.5-94.4 % full.

The next session (2026-12-03, later; the machine swung from 1.6-1.9 s for the loop to 1.03-1.15 s)
    Cut, each measured interleaved with the code before it: the pod-watcher makes a pod's view only for a
    pod that is batched or whose fingerprint moved, not on each of its ~7 changes (``read_pod`` 45 -> 5 us;
    its CPU 1.82-1.93 -> 1.39-1.45 s on the slow machine, 0.99-1.05 -> 0.71-0.84 s on the fast one), and
    disruption's consumer lingers 10 ms after a short batch (:func:`tenon.runtime.decider.batch_linger`; its
    CPU 0.44 -> 0.31-0.39 s; 50 ms cut it further but kept the scale to zero's budget only 83-89 % full).
    On the fast machine, three runs at 412697e: all Running in 4.29-4.30 s (4.56-4.81 s at the session's
    start, two runs interleaved), ``Planned -> Launched`` p99 0.51-0.65 s, ``Launched -> Registered`` p99
    1.55-1.76 s (its target, 1.05 s, is still missed: the registrations' requests queue at the sandbox's
    thread), ``Registered -> Initialized`` p99 1.06-1.17 s; scale to zero in 10.8-11.4 s (13.0-13.1 s),
    never over the budget, 91.2-92.3 % full (94-94.7 %). On the slow machine one run in six or so re-offered
    pods, and one took 19.7 s: pods nominated to two Nodes whose slack others had taken held each other's
    room until a nomination changed (the known gap in :mod:`tenon.services.scheduler.nominations`; the two
    fixes tried slowed the scale run and were reverted).

The session after (2026-12-03, late morning; a slow machine again), two runs each interleaved with cbdef8a
    Cut: a registration patch refused because its Node changed (most often: it turned Ready after the
    observation the registration was decided on) is computed again from the Node as it is and, when that is
    initialized, carries the initialized label, so the claim's Initialized, decided from the next
    observation, needs no patch of its own (that lone patch had queued behind a wave of registrations:
    those claims were ``Registered -> Initialized``'s p99); the sandbox's writes cost less (a patch no
    longer deep-copied, unchanged parts not validated or pruned again, one encoding per write for its event
    and its answer: a pod status patch ~15 % less sandbox CPU, a NodeClaim status patch about half).
    All Running in 5.06-5.82 s (5.59-6.59 s), ``Planned -> Launched`` p99 1.04-1.05 s (0.95-0.99 s),
    ``Launched -> Registered`` p99 1.71-1.99 s (2.33-2.54 s: still over its 1.05 s target),
    ``Registered -> Initialized`` p99 0.04-0.79 s (1.30-1.36 s); the sandbox's CPU 2.8-3.3 s (3.4-4.2 s),
    every service's within the noise. Scale to zero 14.1-14.7 s either way. What the hops are made of on
    such a machine (one run read from its log): every Machine is created within 0.5 s of the plan, but the
    sandbox gives them their providerID 0.13-1.9 s after their creation (0.15 s nominal), which is most of
    ``Planned -> Launched``'s tail; a registration's requests (six nominations, then the Node patch) are
    served by that same busy thread.

The session after (2026-12-03, midday; slow machine), four runs against four of cb00260 within the hour
(two pairs interleaved)
    Tried, measured and reverted: the scheduler carrying its registrations out behind its deciding (a lane
    in a task of its own while the consumer goes on), so that a Node joining while a hundred registrations
    are in flight is registered at once, not after them and its own batch (its log showed batches of 71 and
    239 decisions taking 1.0 and 1.5 s, each making the next wait). ``Registered -> Initialized`` p99
    0.17-0.36 s (0.46-1.37 s), ``Launched -> Registered`` p99 1.64-2.33 s (1.79-3.25 s), all Running
    4.55-6.08 s (5.31-8.13 s). Reverted because ``tenon replay`` found a difference in the scale-to-zero e2e
    test: a claim decided on while its registration was still behind is judged as a Launched claim (its Node
    as the registration will leave it), which replay, folding each answer right after its input, judges as
    Registered (its Node as observed), and an ``Initialized`` came out on a different input. Making it safe
    needs the lifecycle decided per claim only once its lane is done, and a trigger to decide it then.
    Kept: the NodeClaim objects' writes wait while registrations are in flight (their backlog was 150
    claims deep through the whole wave). Also tried and left out: the sandbox's controllers giving way to
    the writes being served (no gain beyond the noise), and at most ten registrations in flight at once
    (worse: a request's round trip on the busy sandbox is 0.1-0.3 s, so ten cannot keep it busy).

The session after (2026-12-03, afternoon; slow machine again), runs interleaved in pairs
    ``tenon replay scheduler --diff`` over a 1,000-pod run's log (the bench's run directory served by a
    nats-server of its own) found 2-4 differences in every run, with or without anything carried out
    behind: a Node Ready when it joins is Registered and Initialized by one answer, and the replay judged the
    Initialized against the claim before the Registered (a refusal) and left it out. Fixed in the replay
    (each decision judged against the claim as the answer's earlier ones leave it), and a registered claim's
    Node observed before its patch showed is now judged as the patch leaves it, so the Initialized is the
    same whether the Registered is folded yet or not. Carrying registrations out behind the deciding was
    then landed again. Four runs with it, four without (2cfbe1a): all Running 6.07-7.13 s (7.37-7.65 s;
    19.4 and 21.1 s in the two runs that opened a series, both without it, where registrations came so late
    that 119 and 589 pods were offered again, as in the session's very first run at 6cdf98f: 13.1 s, 630);
    ``Launched -> Registered`` p99 2.15-2.90 s (1.72-4.03 s); ``Registered -> Initialized`` p99 0.20-0.58 s
    (0.10-1.25 s). The logs of all 19 runs of the session (38 logs, both
    measurements) replay with no difference. Tried and left out: the sandbox serving its clients in turn
    (API Priority and Fairness reduced: a queue per User-Agent, round robin), so that the launcher's Machine
    patches no longer wait behind the scheduler's nominations (the first of a batch of binds came back 0.3 s
    after it was sent). With four requests served per turn of the loop, the watches lost their batching
    (the sandbox's CPU 5.7-6.1 s against 3.9-4.2 s, ``Launched -> Registered`` p50 4 s); with 64 the CPU
    was the same, ``Planned -> Launched`` p99 unchanged (1.38-1.41 s against 1.44-1.45 s) and all Running
    slower (6.86-7.34 s against 5.83-5.84 s): the scheduler's own requests then waited behind everyone's.
    Kept from it: each service's requests carry the User-Agent ``tenon-<service>``.

The session after that (2026-12-03, evening; the machine's speed swinging from run to run: the services' CPU
6.7-14.1 s for the same run)
    Machines got their providerID 2.1-3.8 s after they were created (p90, five runs traced in the sandbox;
    the fast profile says 0.15 s): the sandbox's Cluster API worker, yielding every 5 ms, got one slice per
    turn of a loop crowded with tenon's requests, and that delay counted in ``Planned -> Launched``. In
    those runs all Running took 7.9-15.4 s; in four of them 414-867 pods were offered again once their batch
    was 5 s old, and planning them slowed everything more (runs with fair slices on every worker had such
    runs too in that hour, the machine at its slowest). The simulated cloud's worker now runs as long
    as it waited for its turn, up to 50 ms (:data:`devtools.sandbox.controllers.informer.CLOUD_SLICE_CAP_S`):
    p90 0.41-0.46 s. Two interleaved pairs against the code before (ebe5a2e): ``Planned -> Launched`` p99
    1.39-1.66 s (1.72-2.28 s) but p50 0.95-1.43 s (0.70-0.76 s): the Machines come in one burst, their binds
    go in one larger batch, and the Cluster API work done sooner holds the API server's answers back, so
    the first registrations came 0.4-0.5 s later; all Running 6.87-7.63 s (6.35-7.34 s), no pod offered
    again in any of the four. The sandbox's time moved rather than shrank: its one thread is busy from the
    first Machine to the last pod Running, and whatever is served sooner makes the rest wait. Both logs of
    each run replay with no difference. Tried and left out: the same fair slices for every worker (the
    kubelets', the DaemonSet controller's): the scale run's 10,000-pod wave then starved the sandbox's
    scheduler (308 s, 36 pods never Running); and for the sandbox's scheduler as well: ``Launched ->
    Registered`` p99 2.5 and 4.2 s in two runs. The bench now reports that wait as it was
    (``sandbox_waits``): p50 211 ms, p99 400 ms in a run at HEAD whose ``Planned -> Launched`` p99 was 1.11 s
    (all Running 6.33 s); the full ``make bench`` before it: 1.19 s, all Running 5.58 s.

The session after (2026-12-03, night; a faster machine, 6.0-7.4 CPU s for the services)
    The machine is saturated while the wave joins (two cores: the sandbox 0.55-0.7 of one, the scheduler
    0.3-0.7, the pod-watcher 0.2-0.4, disruption 0.15-0.25, nats-server 0.15), so what tenon saves in CPU or
    in waits it adds itself counts. Three waits went: the scheduler's tick (every 2 s) waited, holding the
    consumer, for every registration carried out behind (1.06 s in a traced run: no Node was registered
    meanwhile); its timeouts judge each claim alone, so it no longer waits (``ticks_by_lane``). About 100 of
    159 registration patches were refused (409: the Node turned Ready while its pods were nominated), then
    read and sent again; the patch now takes the Node as last observed (3-17 refusals per run). And deciding
    every stepping claim again on each batch spent 40 % of its time deriving the same event ids (3.6 ->
    1.6 ms per batch mid-wave). Three interleaved pairs against 7b7e3e2: all Running 5.07-5.30 s
    (4.56-5.57 s), ``Launched -> Registered`` p99 1.20-1.82 s (1.38-2.30 s), ``Registered -> Initialized``
    p99 81-98 ms (73-1,074 ms), ``Planned -> Launched`` p99 0.88-1.10 s (1.04-1.30 s); every log replays
    with no difference. Tried and left out: snapshots every 100,000 records instead of 1,000 (the eight
    1.5 MB snapshots of the wave): no change in CPU within the noise.

The session after (2026-12-03, late night; a fast machine: all Running 3.8-5.6 s at HEAD in a dozen runs)
    What ``Launched -> Registered`` is made of now, timed inside the scheduler (one run): the registration
    starts 0.04 s (p50) after the later of its Node and its Launched, nominates for 0.36 s (p50; p99 0.72 s)
    and patches the Node for 0.17 s (p99 0.67 s); the append takes 2 ms. Without the nominations (measured,
    not kept) the hop's p99 was 0.57-0.67 s instead of 1.3 s, but 7-12 claims a run were bought for displaced
    pods and all Running took 6.3-8.4 s: the nominations are worth their 0.6 s. Alone, against the fast
    sandbox and nothing else, 1,000 nominations take 0.4-0.55 s and cost the sandbox 0.23-0.39 CPU s and
    their client 0.3-0.4 (a third of it reading their watch events): about 0.9 ms of CPU each across the
    stack, on a machine whose two cores are busy through the wave. Tried and left out: the registrations'
    requests let through oldest registration first, at most 48 or 96 in flight (:mod:`heapq` ordering, the
    order that keeps the longest wait shortest on one server). The registrations then ended in the order
    they began, one every 13 ms, but the hop's p99 was 1.8-2.3 s (48) and 1.3-1.5 s (96) against 1.3-1.7 s
    interleaved: the sandbox serves whatever is in flight per turn of its loop, so fewer in flight is less
    served. ``Planned -> Launched`` (p50 0.53-0.87 s) is mostly the bind: a Machine is seen 0.07-0.08 s after
    the plan, has its providerID 0.16-0.18 s later, and is bound 0.42-0.77 s after it was seen (its patch
    waits for the binds of the batch before it, which hold the launcher's consumer); Launched follows the
    bind within 0.1 s. Cut: a publish with no trace context to carry (a watch's, a tick's) no longer asks the
    propagators, and a span nobody records is a null context: ~15 us of a ~210 us sequential publish.

The session after (2026-12-04, morning; the machine's speed swinging again: the services' CPU 4.3-7.3 s)
    Where the end of the wave went, from a pod and Node watch kept beside the bench's (one run, all Running
    in 4.57 s): the Nodes joined 1.9-2.3 s after the first create and were Ready by 2.9 s, but lost their
    unregistered taint at 2.6-3.7 s, 86 of the 159 in the last 0.1 s; the sandbox's scheduler then bound
    the pods about 1,100 a second (p50 0.5 s after their Node registered), the last at 4.4 s. The Nodes
    registered together because each Node patch waited for one of the scheduler's client's 100 connections
    behind every nomination sent before it (timed in the scheduler: nominations p50 0.70 s, then the Node
    patch p50 0.17 s, p90 0.62 s, up to 0.92 s). The nominations now leave 20 connections to the other
    requests: ``Launched -> Registered`` p99 0.96-1.57 s against 1.17-1.72 s in six interleaved pairs, lower
    in each. Tried and left out: 300 connections for the nominations (the sandbox served them all at
    once and the last claims' took 1.3 s). Scale to zero: the first proposal held only the 11 nodes
    consolidatable at its tick, and the 489 that emptied in the next second settled a period of their own
    once it was confirmed, so the budget ran at 11 of 50 for a second (82 % full in two runs of three). A
    proposal now also takes the empty nodes whose ``consolidateAfter`` ends before it settles: 10.6-10.8 s,
    91 % full.

The session after (2026-12-04, afternoon; eight runs at 5c2a678-d69169e, one under py-spy: all Running
    4.06-5.84 s, ``Launched -> Registered`` p99 1.07-1.93 s, every other target met)
    Where the hop's time goes, again (an estimate from the traces above): the Nodes join over about 0.4 s,
    and at some 600 nominations a second the ~750 left when the last one joins take 1.1-1.3 s; the hop's
    p99 is that queue. In
    the sandbox's thread during the wave (py-spy, one run): its scheduler 17 %, requests 20 %, informers
    12 %, the kubelet 12 %, the Cluster API controller 7 %, the DaemonSet controller 6 %, no single cost to
    cut. Tried and left out: uvloop in the sandbox (in every process, then the sandbox alone; two pairs
    each, interleaved): ``Launched -> Registered`` p50 0.15-0.31 s against 0.76-1.13 s, but its p99 1.5-1.75
    s and ``Planned -> Launched`` p99 2.2-2.6 s against 0.74-1.01 s, all Running 4.6-5.1 s against 4.1-4.8 s:
    the sandbox answered requests sooner and ran its controllers later, and the same CPU moved from one hop
    to another.

The session after (2026-12-04, evening; 4acaef3): the hop's time, measured per claim instead of estimated
    A trace in the scheduler (one run, not kept): from the decision to the append, the claim's nominations
    take p50 0.77 s, p90 0.99 s, its Node patch 0.09-0.15 s after them, the append 1-3 ms; the decision
    itself comes 10 ms after ``Launched`` (the Node had been observed 0.15 s before it, the launcher being
    the later of the two). And the machine is full: from the first ``Launched`` to the last ``Registered``
    (1.55 s) the processes' CPU (``/proc``, every 50 ms) adds up to 2.88 of the 3.1 CPU seconds two cores
    give: the sandbox 1.02, the scheduler 0.70, the pod-watcher 0.42, the launcher 0.29, nats-server 0.24,
    disruption 0.18. The 1,000 nominations are about 0.5 of them (client and server, ``nombench``: 1 ms
    each under cProfile). None of them can be left out: a nomination holds room against every pod not
    nominated there, the claim's own too, so a Node's pods are nominated all or none, and all before its
    taint goes, while any other claim's pods still wait un-nominated. Tried, interleaved: nominations in
    flight cut from 80 to 12 (the Node patches would queue behind fewer): the hop's p99 2.5-2.9 s, the
    sandbox's loop takes a burst of requests per turn and far fewer came; raised to 200: p50 0.72-0.76 s
    against 0.98-1.04 s, p99 1.06-1.32 s against 1.22-1.27 s, ``Registered -> Initialized`` p99 up to
    0.5 s, the same trade as uvloop; no snapshots in the run (``TENON_SNAPSHOT_EVERY``; the three deciders
    write 1.5 MB each twice in the window): p99 0.90-1.21 s against 0.96-1.21 s, within the noise. All left
    as they were.

The session after (2026-12-04, night; 09f0047, all Running 4.3-5.4 s while the machine was quiet)
    The hop's shape, per 200 ms (event log, one run): the 159 claims are planned at once and launched in two
    bursts (the launcher binds a fetched batch of Machines together and decides on the next batch once
    that one is carried out: ``Launched`` p50 0.40-0.52 s after the providerID is observed), then they
    register at a steady 110-130 claims a second. The hop's p99 is that queue. From 0.25 s after the plan,
    the two cores are full (1.8-2.0 CPU seconds a second, ``/proc`` every 50 ms); before that, half idle.
    Without nominations (a toggle, not kept; two pairs), the hop's p99 is 0.60-0.64 s against 1.41-1.53 s,
    but all Running takes 7.3-28 s (32-33 pods offered again, 167-170 claims): the nominations are the
    hop's time, and they are also what keeps the plan. Tried and left out:
    * the sandbox's controller slice cut from 5 to 2 ms (three pairs): the hop's p99 1.0-1.33 s against
      1.43-1.48 s, but ``Registered -> Initialized`` p99 0.39-0.87 s, and in two of three runs 180-202
      pods offered again (all Running 7.3-9.9 s): its kube-scheduler ran later;
    The sandbox's pod informer fell behind its Node informer during the wave. Traced: a pod bound to a Node
    to which the store had 6 pods nominated, while the sandbox's scheduler saw none of them, so the pods
    first in its queue took the room those nominations held. That is where the overcommitted nominations
    and the pods offered again of the slow runs came from. Its scheduler now reads both informers' queued
    events before it decides (``Informer.catch_up``), as a real kube-scheduler's informers, milliseconds
    behind the API server, would have them. Seven interleaved pairs, before/after: all Running in 4.84-8.37 s
    (median 5.34) and 4.57-6.62 s (median 5.6); ``Launched -> Registered`` p99 1.29-1.79 s (median 1.46)
    and 0.97-1.53 s (median 1.37); pods offered again in 2 of 7 runs (1-3) and in none. The first three pairs
    favoured "before", the last four "after". Read at each cycle's start only (three pairs, a slow phase):
    mixed, one run with 67 pods offered again.
    py-spy puts 17-21 % of the scheduler's and the pod-watcher's samples in the socket ``send`` of
    nats-py's flusher, but the services' system time is 0.11 of their 2.03 CPU seconds in the window. Those
    samples are mostly the process waiting to run again after it wakes nats-server, not CPU time.

The session after (2026-12-04, late evening; a fast phase of the machine: the whole ``make bench`` ran in
    5 min against 11-13, and the sandbox's own HTTP write throughput was 8,258 writes/s against 1,904 the
    night before, with no change to it). At bbcef5a, from a fresh clone, every target was met: all Running
    2.80 s, ``Planned -> Launched`` p99 497 ms, ``Launched -> Registered`` p99 759 ms, ``Registered ->
    Initialized`` p99 66 ms, last Unschedulable -> planned 1.071 s, scale to zero 8.28 s, the budget 90 %
    full. That fill was the thinnest margin (90-92 % in every run of the day). From the log, the budget's
    empty share was spread evenly over the scale-down: each claim terminated freed its slot 12 ms (p50) to
    54 ms (max) before the next request, mostly disruption's 10 ms batching wait. Disruption no longer waits
    while a confirmed queue waits for budget (its ``batch_linger`` is asked with the state after each batch):
    two interleaved pairs, 91.6-91.8 % -> 96.0-96.1 % full, its CPU in the scale to zero 2.0-2.2 -> 2.6 s,
    in provisioning unchanged (0.16-0.18 s); with no wait at all, provisioning cost it 0.26-0.27 s. Its
    budget load is then kept event by event instead of a walk over every claim at each queue step
    (:mod:`tenon.services.disruption.load`): two more pairs, its CPU in the scale to zero 2.37-2.40 ->
    2.09-2.14 s, the budget 96-97 % full. Registration in the fast phase, per 100 ms of one run's log: the
    Nodes are seen 0.2-0.3 s after the plan (most before their claim's ``Launched``), and the registrations
    run from 0.4 s to 1.2 s at 200-350 a second, each nominating its claim's pods and patching its Node: the
    hop's p99 is still that queue, now inside its target.

Every wait gives up when nothing has moved for a while (no pod started for 120 s, no node removed for 60 s)
and the figures then say what never happened, so ``make bench`` always ends. What limits the numbers is
printed with them: the CPU seconds each process (sandbox, each service,
nats-server is not counted) spent during the run, read from ``/proc``, so a slow run names its bottleneck.

Layers: the analysis of the log (:func:`chain_hops`, :func:`disruption_overlap`, :func:`percentile`) is pure,
plain records in and figures out, and unit-tested on its own; :func:`measure_provisioning` and
:func:`measure_scale_to_zero` drive a running stack; :func:`run` sizes them and builds the :class:`Suite`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import math
import os
import pstats
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.suite import Suite, Target
from devtools.stack import DEMO_DIR, LocalStack, apply_manifests, connect, load_manifests
from proto import subjects
from proto.events import (
    CatalogSnapshot,
    DisruptionDecision,
    DisruptionRequested,
    Event,
    MachineObserved,
    NodeClaimEvent,
    NodeClaimInitialized,
    NodeClaimLaunched,
    NodeClaimPlanned,
    NodeClaimRegistered,
    NodeClaimTerminated,
    NodePoolsSnapshot,
    PendingBatch,
)
from tenon.core.wellknown import HOSTNAME, MAX_SIZE
from tenon.runtime.eventlog import EventLogError
from tenon.runtime.eventlog.connection import ConnectionSettings
from tenon.runtime.eventlog.jetstream import JetStreamEventLog
from tenon.runtime.kube import MACHINEDEPLOYMENTS, NODECLAIMS, NODEPOOLS, NODES, PODS, Kube
from tenon.runtime.kube.resources import DEPLOYMENTS
from tenon.runtime.kube.watching import Relisted, WatchChange, list_and_watch

NAMESPACE = "default"
BATCH_IDLE_S = 1.0
"""pod-watcher's default idle window: the batch closes this long after the last new pending pod."""
PLANNING_TARGET_S = BATCH_IDLE_S + 0.25
CLUSTER_AUTOSCALER_BOUND = "30 s max, ~5 s avg (< 100 nodes)"
KARPENTER_FIELD_SCALE_TO_ZERO = "~3 min (field)"
FAST_PROFILE_WAITS = {
    "Planned -> Launched": "0.15 s providerID",
    "Launched -> Registered": "0.05 s node join",
    "Registered -> Initialized": "0.1 s node Ready",
}
SANDBOX_WAIT_S = {
    "Planned -> Launched": 0.15,
    "Launched -> Registered": 0.05,
    "Registered -> Initialized": 0.1,
}
"""The fast profile's own waits inside each hop (seconds)."""
PROVIDER_ID_WAIT = "Machine seen -> providerID"
"""The sandbox's wait inside ``Planned -> Launched`` as measured on the run (:func:`provider_id_waits`)."""
ALL_RUNNING_TARGET_S = 5.0
LEFTOVER_SHARE_TARGET = 0.02
"""Issue 10: claims bought for pods the kube-scheduler placed otherwise than planned, as a share of claims."""
EVERY_CLAIM_TARGET_S = 3.0
"""Issue 10: last Unschedulable -> every claim planned, the claims for such leftovers included."""
HOP_TARGET_S = 1.0
"""Each hop's p99 may exceed the sandbox's own wait in it by this much (issue 16)."""
SCALE_TO_ZERO_TARGET_S = 30.0
BUDGET_FILL_TARGET = 0.9
CPU_CHOICES = ("250m", "500m", "750m", "1", "1500m", "2")
MEMORY_CHOICES = ("256Mi", "512Mi", "1Gi", "2Gi")
CHAIN_EVENTS = (NodeClaimPlanned, NodeClaimLaunched, NodeClaimRegistered, NodeClaimInitialized)
HOPS = (
    "PendingBatch -> Planned",
    "Planned -> Launched",
    "Launched -> Registered",
    "Registered -> Initialized",
)


# --------------------------------------------------------------------------------------------- pure analysis


@dataclass(frozen=True)
class TimedEvent:
    """One event of the log and the time the broker stored it."""

    recorded_at: datetime
    event: Event


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (nearest rank, 0 <= q <= 1) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def chain_hops(events: Iterable[TimedEvent]) -> dict[str, list[float]]:
    """Seconds each claim spent on each hop of the provisioning chain (only the hops both ends of which are in
    the log). A claim's first event of each type counts (a redelivered duplicate is not a new step)."""
    batches: dict[str, datetime] = {}
    steps: dict[str, dict[str, TimedEvent]] = {}
    for timed in sorted(events, key=lambda t: t.recorded_at):
        event = timed.event
        if isinstance(event, PendingBatch):
            batches.setdefault(event.id, timed.recorded_at)
        elif isinstance(event, CHAIN_EVENTS):
            steps.setdefault(event.nodeclaim, {}).setdefault(type(event).__name__, timed)
    hops: dict[str, list[float]] = {hop: [] for hop in HOPS}
    order = ("NodeClaimPlanned", "NodeClaimLaunched", "NodeClaimRegistered", "NodeClaimInitialized")
    for claim_steps in steps.values():
        planned = claim_steps.get("NodeClaimPlanned")
        if planned is not None and planned.event.causation_id in batches:
            hops[HOPS[0]].append((planned.recorded_at - batches[planned.event.causation_id]).total_seconds())
        for hop, (before, after) in zip(HOPS[1:], itertools.pairwise(order), strict=True):
            if before in claim_steps and after in claim_steps:
                elapsed = claim_steps[after].recorded_at - claim_steps[before].recorded_at
                hops[hop].append(elapsed.total_seconds())
    return hops


def provider_id_waits(events: Iterable[TimedEvent]) -> list[float]:
    """Seconds from each Machine's first observation to the first one showing its ``spec.providerID``, as the
    launcher recorded them: the sandbox's own wait inside ``Planned -> Launched`` as it was on this run, where
    :data:`SANDBOX_WAIT_S` says what the profile promises. On a busy sandbox it was 2-4 s, not 0.15 s
    (:data:`devtools.sandbox.controllers.informer.CLOUD_SLICE_CAP_S`). A Machine first seen with its
    providerID already, or never with it, gives no figure."""
    first_seen: dict[str, datetime] = {}
    measured: set[str] = set()
    waits: list[float] = []
    for timed in sorted(events, key=lambda t: t.recorded_at):
        event = timed.event
        if not isinstance(event, MachineObserved) or event.change == "removed":
            continue
        uid = str((event.machine.get("metadata") or {}).get("uid") or "")
        if not uid or uid in measured:
            continue
        provisioned = bool((event.machine.get("spec") or {}).get("providerID"))
        if uid not in first_seen:
            first_seen[uid] = timed.recorded_at
            if provisioned:
                measured.add(uid)
        elif provisioned:
            waits.append((timed.recorded_at - first_seen[uid]).total_seconds())
            measured.add(uid)
    return waits


@dataclass(frozen=True)
class OverlapReport:
    """How many claims were being disrupted at once, against the budget computed from the log."""

    peak: int
    """Most claims between their DisruptionRequested and NodeClaimTerminated at one moment."""
    budget_at_peak: int
    """The budget in force at that moment (ceil(percent x claims alive then))."""
    initial_budget: int
    """The budget in force at the first request (the whole pool alive)."""
    violations: int
    """DisruptionRequested moments at which the overlap exceeded the budget in force."""
    worst_excess: int
    disrupted: int
    """Claims that got a DisruptionRequested."""
    unfinished: int
    """Claims requested but never terminated (their interval is open to the end of the log)."""
    utilisation: float | None = None
    """How full the budget was kept, from the first request to the last: the time-weighted mean of
    min(1, claims being disrupted / budget in force). None without two requests."""


def _budget(alive: int, percent: float) -> int:
    return math.ceil(alive * percent / 100)


def disruption_overlap(events: Iterable[TimedEvent], percent: float) -> OverlapReport:
    """Sweep the log in order: each claim is being disrupted from its first ``DisruptionRequested`` to its
    ``NodeClaimTerminated``; at each request, compare the overlap with the budget in force then,
    ``ceil(percent/100 x alive)``, where alive is the number of claims planned and not yet terminated at that
    moment (what Karpenter counts: a pool's claims until they are gone). Between the first request and the
    last, also measure how full the budget was kept."""
    ordered = sorted(events, key=lambda t: t.recorded_at)
    alive: set[str] = set()
    disrupting: set[str] = set()
    requested: set[str] = set()
    initial_budget: int | None = None
    peak = budget_at_peak = violations = worst_excess = 0
    filled = Filling()
    for timed in ordered:
        event = timed.event
        filled.advance(timed.recorded_at, len(disrupting), _budget(len(alive), percent))
        if isinstance(event, NodeClaimPlanned):
            alive.add(event.nodeclaim)
        elif isinstance(event, DisruptionRequested) and event.nodeclaim not in requested:
            requested.add(event.nodeclaim)
            disrupting.add(event.nodeclaim)
            in_force = _budget(len(alive), percent)
            filled.requested(timed.recorded_at)
            if initial_budget is None:
                initial_budget = in_force
            if len(disrupting) > peak:
                peak, budget_at_peak = len(disrupting), in_force
            if len(disrupting) > in_force:
                violations += 1
                worst_excess = max(worst_excess, len(disrupting) - in_force)
        elif isinstance(event, NodeClaimTerminated):
            alive.discard(event.nodeclaim)
            disrupting.discard(event.nodeclaim)
    return OverlapReport(
        peak=peak,
        budget_at_peak=budget_at_peak,
        initial_budget=initial_budget or 0,
        violations=violations,
        worst_excess=worst_excess,
        disrupted=len(requested),
        unfinished=len(disrupting),
        utilisation=filled.mean(),
    )


@dataclass
class Filling:
    """The time-weighted fill of a budget, from the first request to the last one seen."""

    since: datetime | None = None
    last_request: datetime | None = None
    weighted: float = 0.0
    """Seconds x fill, up to ``last_request``."""
    _pending: float = 0.0
    """Seconds x fill since ``last_request`` (counted only if another request follows)."""
    _at: datetime | None = None

    def advance(self, moment: datetime, in_flight: int, budget: int) -> None:
        if self._at is not None and self.since is not None:
            fill = min(1.0, in_flight / budget) if budget else 1.0
            self._pending += (moment - self._at).total_seconds() * fill
        self._at = moment

    def requested(self, moment: datetime) -> None:
        if self.since is None:
            self.since = moment
        self.weighted += self._pending
        self._pending = 0.0
        self.last_request = moment

    def mean(self) -> float | None:
        if self.since is None or self.last_request is None or self.last_request <= self.since:
            return None
        return self.weighted / (self.last_request - self.since).total_seconds()


@dataclass(frozen=True)
class PlanningWaves:
    """The claims planned for the pods as they first went pending, apart from those planned later for pods
    offered again (pod-watcher re-offers a pod still pending a batching window after the last Node turned
    schedulable, or ``rebatch`` seconds after its batch: the kube-scheduler placed pods other than the plan
    assumed and some were left without room)."""

    first_wave_last_planned: datetime | None
    later_batches: int
    later_pods: int
    later_claims: int


def planning_waves(
    events: Iterable[TimedEvent], last_unschedulable: datetime, slack_s: float = 0.5
) -> PlanningWaves:
    """Batches whose window opened by the time the last pod went pending (plus ``slack_s`` for the two
    observers' lag) are the first wave; any later batch re-offers pods."""
    ordered = sorted(events, key=lambda t: t.recorded_at)
    first_wave: set[str] = set()
    later_batches = later_pods = later_claims = 0
    first_wave_last: datetime | None = None
    for timed in ordered:
        event = timed.event
        if isinstance(event, PendingBatch):
            if (event.window_opened_at - last_unschedulable).total_seconds() <= slack_s:
                first_wave.add(event.id)
            else:
                later_batches += 1
                later_pods += len(event.pods)
        elif isinstance(event, NodeClaimPlanned):
            if event.causation_id in first_wave:
                first_wave_last = timed.recorded_at
            else:
                later_claims += 1
    return PlanningWaves(first_wave_last, later_batches, later_pods, later_claims)


def last_steps_of_unfinished(events: Iterable[TimedEvent]) -> dict[str, int]:
    """For the claims that never reached ``NodeClaimTerminated``: how many stopped at each last step (e.g.
    ``{"NodeClaimLaunched": 16}``: launched, never registered, so never a disruption candidate)."""
    last: dict[str, str] = {}
    for timed in sorted(events, key=lambda t: t.recorded_at):
        event = timed.event
        if isinstance(event, NodeClaimEvent):
            last[event.nodeclaim] = type(event).__name__
    counts: dict[str, int] = {}
    for step in last.values():
        if step != "NodeClaimTerminated":
            counts[step] = counts.get(step, 0) + 1
    return counts


def hop_summary(hops: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """p50/p99/max in milliseconds and the count, per hop with any values."""
    return {
        hop: {
            "count": len(values),
            "p50_ms": percentile(values, 0.50) * 1000,
            "p99_ms": percentile(values, 0.99) * 1000,
            "max_ms": max(values) * 1000,
        }
        for hop, values in hops.items()
        if values
    }


# ------------------------------------------------------------------------------------------ workloads (pure)


def infrastructure(
    *, max_size: int, budgets: list[dict[str, str]] | None = None, consolidate_after: str = "30s"
) -> list[dict[str, Any]]:
    """The demo's NodePool, NodeClass, MachineDeployments and DaemonSet, with limits lifted for ``max_size``
    machines per MachineDeployment (the demo caps each at 10 and the pool at 64 CPU)."""
    documents = load_manifests(
        [DEMO_DIR / "nodepool.yaml", DEMO_DIR / "machinedeployments.yaml", DEMO_DIR / "daemonset.yaml"]
    )
    for doc in documents:
        if doc["kind"] == "MachineDeployment":
            doc["metadata"]["annotations"][MAX_SIZE] = str(max_size)
        elif doc["kind"] == "NodePool":
            spec = doc["spec"]
            spec["limits"] = {"cpu": str(max_size * 8 * 3)}
            spec["disruption"]["consolidateAfter"] = consolidate_after
            if budgets is not None:
                spec["disruption"]["budgets"] = budgets
    return documents


def deployment(
    name: str, replicas: int, cpu: str, memory: str, *, one_per_node: bool = False
) -> dict[str, Any]:
    labels = {"app": name, "bench": "e2e"}
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if one_per_node:
        pod_spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": HOSTNAME}
                ]
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def varied_deployments(count: int, replicas: int) -> list[dict[str, Any]]:
    """``count`` Deployments of ``replicas`` pods; requests cycle through 250m-2 CPU and 256Mi-2Gi."""
    return [
        deployment(
            f"bench-{i:02d}",
            replicas,
            CPU_CHOICES[i % len(CPU_CHOICES)],
            MEMORY_CHOICES[(i // 2) % len(MEMORY_CHOICES)],
        )
        for i in range(count)
    ]


# ------------------------------------------------------------------------------------------------------- I/O


@dataclass
class PodTracker:
    """The bench's own pod watch: when each pod was first seen Unschedulable, and which pods run now."""

    first_unschedulable: dict[str, float] = field(default_factory=dict)
    phase: dict[str, str] = field(default_factory=dict)
    first_running: dict[str, float] = field(default_factory=dict)

    def see(self, pod: dict[str, Any], deleted: bool = False) -> None:
        uid = pod["metadata"]["uid"]
        if deleted:
            self.phase.pop(uid, None)
            return
        status = pod.get("status") or {}
        self.phase[uid] = status.get("phase") or "Pending"
        if self.phase[uid] == "Running":
            self.first_running.setdefault(uid, time.time())
        if uid not in self.first_unschedulable and any(
            (c.get("type"), c.get("status"), c.get("reason")) == ("PodScheduled", "False", "Unschedulable")
            for c in status.get("conditions") or []
        ):
            self.first_unschedulable[uid] = time.time()

    @property
    def running(self) -> int:
        return sum(1 for phase in self.phase.values() if phase == "Running")


async def track_pods(kube: Kube, tracker: PodTracker) -> None:
    async for change in list_and_watch(kube, PODS, NAMESPACE, label_selector="bench=e2e"):
        if isinstance(change, Relisted):
            seen = {p["metadata"]["uid"] for p in change.items}
            for uid in [u for u in tracker.phase if u not in seen]:
                tracker.phase.pop(uid)
            for pod in change.items:
                tracker.see(pod)
        elif isinstance(change, WatchChange):
            tracker.see(change.object, deleted=change.type == "DELETED")


async def read_log(url: str, subject_filters: Sequence[str]) -> list[TimedEvent]:
    event_log = await JetStreamEventLog.connect(ConnectionSettings(servers=(url,)), provision=False)
    try:
        events: list[TimedEvent] = []
        for subject_filter in subject_filters:
            async for record in event_log.read(subject_filter):
                event = record.event
                if event is not None:
                    events.append(TimedEvent(record.recorded_at, event))
        return sorted(events, key=lambda t: t.recorded_at)
    finally:
        await event_log.close()


async def _wait_for(
    probe: Callable[[], Awaitable[bool]], timeout: float, what: str, stack: LocalStack, interval: float = 0.25
) -> float:
    """Poll ``probe`` until true; returns the wall-clock time it became true. Fails fast if a service died."""
    deadline = time.monotonic() + timeout
    while True:
        if await probe():
            return time.time()
        dead = stack.dead_services()
        if dead:
            raise RuntimeError(f"service(s) exited while waiting for {what}: {dead}; logs in {stack.run_dir}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}; logs in {stack.run_dir}")
        await asyncio.sleep(interval)


async def prepare_stack(
    stack: LocalStack, kube: Kube, management: Kube, documents: list[dict[str, Any]]
) -> None:
    """Apply the infrastructure and wait until the catalog and the NodePool are in the log (pods before them
    would be batched against an empty catalog)."""
    await apply_manifests(kube, management, documents)

    async def ready() -> bool:
        try:
            logged = await read_log(stack.nats_url, ("tenon.catalog.>", "tenon.cluster.nodepools"))
        except EventLogError:  # no service has provisioned the stream yet
            return False
        kinds = {type(t.event) for t in logged}
        return CatalogSnapshot in kinds and NodePoolsSnapshot in kinds

    await _wait_for(ready, 30, "the catalog and NodePools in the log", stack, interval=0.2)
    await asyncio.sleep(0.5)  # the scheduler folds them in after they are stored


def cpu_seconds_by_process(stack: LocalStack) -> dict[str, float]:
    """CPU seconds (user + system) each live process of the stack has used so far, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    usage: dict[str, float] = {}
    for name, process in stack.processes.items():
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = open(f"/proc/{process.pid}/stat").read().rsplit(")", 1)[1].split()
            usage[name] = (int(fields[11]) + int(fields[12])) / ticks
    return usage


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


async def measure_provisioning(
    stack: LocalStack, deployments: int, replicas: int, timeout: float, stall: float = 120.0
) -> dict[str, Any]:
    """Figures of one provisioning run on a started stack (see the module docstring). Stops waiting when no
    more pod has started for ``stall`` seconds and reports how many never ran."""
    kube, management = await connect(stack)
    tracker = PodTracker()
    watch = asyncio.create_task(track_pods(kube, tracker))
    try:
        max_size = max(10, deployments * replicas)
        await prepare_stack(stack, kube, management, infrastructure(max_size=max_size))
        expected = deployments * replicas
        cpu_before = cpu_seconds_by_process(stack)
        started = time.time()
        await asyncio.gather(
            *(apply_manifests(kube, management, [d]) for d in varied_deployments(deployments, replicas))
        )

        async def running_pods() -> int:
            return tracker.running

        running, running_at = await wait_for_progress(
            stack, running_pods, expected, timeout, stall, "pods Running"
        )
        cpu = cpu_delta(cpu_before, cpu_seconds_by_process(stack))
        await asyncio.sleep(0.5)  # the last lifecycle events reach the log
        events = await read_log(
            stack.nats_url, (subjects.PENDING, "tenon.nodeclaim.>", subjects.CAPI_MACHINES)
        )
        nodes, _ = await kube.list(NODES)
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await kube.close()
        await management.close()
    planned = [t for t in events if isinstance(t.event, NodeClaimPlanned)]
    if not planned:
        raise RuntimeError(f"no NodeClaimPlanned in the log; logs in {stack.run_dir}")
    last_unschedulable = max(tracker.first_unschedulable.values())
    last_planned = max(t.recorded_at for t in planned).timestamp()
    waves = planning_waves(events, datetime.fromtimestamp(last_unschedulable, UTC))
    by_type: dict[str, int] = {}
    price = 0.0
    for timed in planned:
        assert isinstance(timed.event, NodeClaimPlanned)
        by_type[timed.event.choice.instance_type] = by_type.get(timed.event.choice.instance_type, 0) + 1
        price += timed.event.choice.price_per_hour
    return {
        "pods": expected,
        "deployments": deployments,
        "pods_never_running": expected - running,
        "all_running_s": None if running < expected else running_at - started,
        "pods_seen_unschedulable": len(tracker.first_unschedulable),
        "first_to_last_unschedulable_s": last_unschedulable - min(tracker.first_unschedulable.values()),
        "last_unschedulable_to_all_planned_s": last_planned - last_unschedulable,
        "last_unschedulable_to_first_wave_planned_s": (
            None
            if waves.first_wave_last_planned is None
            else waves.first_wave_last_planned.timestamp() - last_unschedulable
        ),
        "pods_offered_again": waves.later_pods,
        "later_batches": waves.later_batches,
        "claims_for_pods_offered_again": waves.later_claims,
        "pending_batches": sum(1 for t in events if isinstance(t.event, PendingBatch)),
        "claims": len(planned),
        "claims_by_type": by_type,
        "nodes": len(nodes),
        "price_per_hour": round(price, 4),
        "hops": hop_summary(chain_hops(events)),
        "sandbox_waits": hop_summary({PROVIDER_ID_WAIT: provider_id_waits(events)}),
        "timeline_s": timeline(events, tracker, started),
        "cpu_seconds": cpu,
        "run_dir": str(stack.run_dir),
    }


def timeline(events: Iterable[TimedEvent], tracker: PodTracker, started: float) -> dict[str, list[float]]:
    """When each step of the burst happened, in seconds after the Deployments were applied: [first, median,
    last] over the pods (Unschedulable, Running) or claims (each lifecycle step). Where the hops say how long
    each step took, this says where the 5 s went."""

    def spread(moments: Iterable[float]) -> list[float]:
        ordered = sorted(m - started for m in moments)
        if not ordered:
            return []
        return [round(ordered[0], 2), round(ordered[len(ordered) // 2], 2), round(ordered[-1], 2)]

    steps: dict[str, list[float]] = {"Unschedulable": list(tracker.first_unschedulable.values())}
    for timed in events:
        if isinstance(timed.event, CHAIN_EVENTS):
            steps.setdefault(type(timed.event).__name__.removeprefix("NodeClaim"), []).append(
                timed.recorded_at.timestamp()
            )
    steps["Running"] = list(tracker.first_running.values())
    return {step: spread(moments) for step, moments in steps.items()}


async def wait_for_progress(
    stack: LocalStack, count: Callable[[], Awaitable[int]], goal: int, timeout: float, stall: float, what: str
) -> tuple[int, float]:
    """Poll ``count()`` until it reaches ``goal``, or until it has not moved for ``stall`` seconds (a pod the
    system never runs, a node it never removes, must not hang the bench). Returns (the last count, the
    wall-clock time it last changed). Fails at once if a service died."""
    deadline = time.monotonic() + timeout
    current, last_change, changed_at = -1, time.monotonic(), time.time()
    while True:
        value = await count()
        if value != current:
            current, last_change, changed_at = value, time.monotonic(), time.time()
        if value == goal or time.monotonic() - last_change > stall or time.monotonic() > deadline:
            return current, changed_at
        dead = stack.dead_services()
        if dead:
            raise RuntimeError(f"service(s) exited while waiting for {what}: {dead}; logs in {stack.run_dir}")
        await asyncio.sleep(0.25)


async def measure_scale_to_zero(
    stack: LocalStack, nodes: int, timeout: float, stall: float = 60.0
) -> dict[str, Any]:
    """Provision ``nodes`` one-pod nodes, then delete the workload and measure the way back to zero. Gives up
    waiting when no node has gone for ``stall`` seconds, and reports what is left and where its claims
    stopped."""
    kube, management = await connect(stack)
    tracker = PodTracker()
    watch = asyncio.create_task(track_pods(kube, tracker))
    try:
        documents = infrastructure(
            max_size=max(10, nodes), budgets=[{"nodes": "10%"}], consolidate_after="1h"
        )
        await prepare_stack(stack, kube, management, documents)
        provision_started = time.time()
        await apply_manifests(
            kube, management, [deployment("bench-one-per-node", nodes, "1500m", "1Gi", one_per_node=True)]
        )

        async def running_pods() -> int:
            return tracker.running

        running, running_at = await wait_for_progress(
            stack, running_pods, nodes, timeout, stall, "pods Running"
        )
        node_list, _ = await kube.list(NODES)
        claims_before, _ = await kube.list(NODECLAIMS)
        await kube.patch(NODEPOOLS, "default", {"spec": {"disruption": {"consolidateAfter": "1s"}}})
        cpu_before = cpu_seconds_by_process(stack)
        deleted_at = time.time()
        await kube.delete(DEPLOYMENTS, "bench-one-per-node", NAMESPACE)

        async def node_count() -> int:
            return len((await kube.list(NODES))[0])

        nodes_left, no_nodes_at = await wait_for_progress(
            stack, node_count, 0, timeout, stall, "no Node left"
        )
        zero_replicas_at: float | None = None
        if not nodes_left:

            async def machine_deployments_at_zero() -> bool:
                mds, _ = await management.list(MACHINEDEPLOYMENTS)
                return not any(int((m.get("spec") or {}).get("replicas") or 0) for m in mds)

            zero_replicas_at = await _wait_for(
                machine_deployments_at_zero, 60, "every MachineDeployment at 0", stack
            )
        cpu = cpu_delta(cpu_before, cpu_seconds_by_process(stack))
        await asyncio.sleep(0.5)
        events = await read_log(stack.nats_url, ("tenon.nodeclaim.>", "tenon.disruption.>"))
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await kube.close()
        await management.close()
    overlap = disruption_overlap(events, 10)
    terminated = [t.recorded_at.timestamp() for t in events if isinstance(t.event, NodeClaimTerminated)]
    decisions = [t.event for t in events if isinstance(t.event, DisruptionDecision)]
    planned = {t.event.nodeclaim for t in events if isinstance(t.event, NodeClaimPlanned)}
    return {
        "nodes": len(node_list),
        "claims": len(planned),
        "nodeclaim_objects": len(claims_before),
        "pods_never_running": nodes - running,
        "provision_s": None if running < nodes else running_at - provision_started,
        "nodes_left": nodes_left,
        "stuck_claims_last_step": last_steps_of_unfinished(events),
        "delete_to_no_node_s": None if nodes_left else no_nodes_at - deleted_at,
        "delete_to_last_terminated_s": (max(terminated) - deleted_at) if terminated else None,
        "delete_to_replicas_zero_s": None if zero_replicas_at is None else zero_replicas_at - deleted_at,
        "decisions": len(decisions),
        "first_decision_budget": decisions[0].budget if decisions else None,
        "peak_disrupting": overlap.peak,
        "budget_at_peak": overlap.budget_at_peak,
        "initial_budget": overlap.initial_budget,
        "budget_violations": overlap.violations,
        "worst_excess": overlap.worst_excess,
        "claims_disrupted": overlap.disrupted,
        "claims_unfinished": overlap.unfinished,
        "budget_utilisation": overlap.utilisation,
        "cpu_seconds": cpu,
        "run_dir": str(stack.run_dir),
    }


PROFILE_ENV = "TENON_BENCH_PROFILE"
"""A directory: every process of the stack (sandbox, each service; or those named, comma-separated, in
``TENON_BENCH_PROFILE_ONLY``) runs under cProfile and writes ``<dir>/<measure>/<process>.pstats`` when it
stops; the suite keeps each one's busiest functions with its figures."""

_PROFILE_HOOK = """\
import atexit, cProfile, os, sys
_out = os.environ.get("TENON_BENCH_PROFILE_OUT")
_identity = os.environ.get("TENON_IDENTITY")
_name = _identity.split("-1-")[0] if _identity else "sandbox" if "sandbox" in sys.argv else str(os.getpid())
_only = [n for n in os.environ.get("TENON_BENCH_PROFILE_ONLY", "").split(",") if n]
# only the stack's processes have the variable (at this point sys.argv is still ["-m", ...])
if _out and (not _only or _name in _only):
    _profile = cProfile.Profile()
    _profile.enable()

    @atexit.register
    def _dump() -> None:
        _profile.disable()
        _profile.dump_stats(os.path.join(_out, _name + ".pstats"))
"""


def profiled_env(measure: str) -> dict[str, str]:
    """The stack's extra environment when :data:`PROFILE_ENV` names a directory: a ``sitecustomize`` that
    profiles each process of the stack (the env hook is the bench's own; nothing in tenon knows of it)."""
    root = os.environ.get(PROFILE_ENV)
    if not root:
        return {}
    out = Path(root).resolve() / measure
    hook = out / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(_PROFILE_HOOK)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    only = os.environ.get("TENON_BENCH_PROFILE_ONLY", "")
    return {"PYTHONPATH": path, "TENON_BENCH_PROFILE_OUT": str(out), "TENON_BENCH_PROFILE_ONLY": only}


def profile_summary(measure: str, top: int = 25) -> dict[str, list[str]]:
    """Each profiled process's busiest functions (own time), as printed lines; empty when not profiling."""
    root = os.environ.get(PROFILE_ENV)
    if not root:
        return {}
    summary: dict[str, list[str]] = {}
    for path in sorted((Path(root).resolve() / measure).glob("*.pstats")):
        stream = io.StringIO()
        stats = pstats.Stats(str(path), stream=stream)
        stats.sort_stats("tottime").print_stats(top)
        summary[path.stem] = stream.getvalue().splitlines()
    return summary


def run_provisioning(deployments: int, replicas: int, timeout: float) -> dict[str, Any]:
    with LocalStack(profile="fast", extra_env=profiled_env("provisioning")) as stack:
        result = asyncio.run(measure_provisioning(stack, deployments, replicas, timeout))
    return {**result, "profile": profile_summary("provisioning")} if os.environ.get(PROFILE_ENV) else result


def run_scale_to_zero(nodes: int, timeout: float) -> dict[str, Any]:
    with LocalStack(profile="fast", extra_env=profiled_env("scale_to_zero")) as stack:
        result = asyncio.run(measure_scale_to_zero(stack, nodes, timeout))
    return {**result, "profile": profile_summary("scale_to_zero")} if os.environ.get(PROFILE_ENV) else result


# ---------------------------------------------------------------------------------------------------- suite


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _top(cpu: dict[str, float], count: int = 3) -> str:
    busiest = sorted(cpu.items(), key=lambda kv: -kv[1])[:count]
    return ", ".join(f"{name} {seconds:.1f}s" for name, seconds in busiest)


def run(quick: bool) -> Suite:
    deployments, replicas, nodes = (4, 50, 50) if quick else (20, 50, 500)
    timeout = 300.0 if quick else 1200.0
    provisioning = run_provisioning(deployments, replicas, timeout)
    scale_down = run_scale_to_zero(nodes, timeout)
    suite = Suite(
        title=f"end to end, sandbox fast profile ({provisioning['pods']} pods; {nodes} empty nodes -> 0)",
        columns=["measure", "value", "reference"],
        data={
            "provisioning": provisioning,
            "scale_to_zero": scale_down,
            "references": {
                "cluster_autoscaler": CLUSTER_AUTOSCALER_BOUND,
                "karpenter_scale_to_zero": KARPENTER_FIELD_SCALE_TO_ZERO,
            },
        },
    )
    suite.rows += provisioning_rows(provisioning) + scale_to_zero_rows(scale_down)
    suite.targets += provisioning_targets(provisioning) + scale_to_zero_targets(scale_down)
    return suite


def provisioning_rows(p: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = [
        [
            f"{p['pods']} pods / {p['deployments']} Deployments -> all Running",
            _seconds(p["all_running_s"])
            if not p["pods_never_running"]
            else f"never: {p['pods_never_running']} pods not Running when progress stopped",
            f"cluster-autoscaler: {CLUSTER_AUTOSCALER_BOUND}",
        ],
        [
            "pods seen Unschedulable (first -> last)",
            f"{p['pods_seen_unschedulable']} ({p['first_to_last_unschedulable_s']:.2f} s)",
            "",
        ],
        [
            "last Unschedulable -> every NodeClaim planned",
            f"{p['last_unschedulable_to_all_planned_s']:.3f} s",
            f"batch window {BATCH_IDLE_S:.0f} s + 250 ms",
        ],
        [
            "  of which the first wave (pods as they went pending)",
            _seconds(p["last_unschedulable_to_first_wave_planned_s"]),
            "",
        ],
        [
            "  pods offered again later (batches / claims)",
            f"{p['pods_offered_again']} ({p['later_batches']} / {p['claims_for_pods_offered_again']})",
            "re-offered 1 s after the last node came (else 5 s after batch)",
        ],
        ["PendingBatch events", p["pending_batches"], ""],
        ["claims / nodes", f"{p['claims']} / {p['nodes']} ({p['claims_by_type']})", ""],
        ["price per hour", f"{p['price_per_hour']:.2f}", ""],
    ]
    for hop in HOPS:
        figures = p["hops"].get(hop)
        if figures:
            rows.append(
                [
                    f"hop {hop} (p50 / p99 / max, n={figures['count']})",
                    f"{figures['p50_ms']:.0f} / {figures['p99_ms']:.0f} / {figures['max_ms']:.0f} ms",
                    f"sandbox waits {FAST_PROFILE_WAITS[hop]}" if hop in FAST_PROFILE_WAITS else "",
                ]
            )
    for wait, figures in (p.get("sandbox_waits") or {}).items():
        rows.append(
            [
                f"  sandbox: {wait} (p50 / p99 / max, n={figures['count']})",
                f"{figures['p50_ms']:.0f} / {figures['p99_ms']:.0f} / {figures['max_ms']:.0f} ms",
                f"the profile says {SANDBOX_WAIT_S['Planned -> Launched'] * 1000:.0f} ms",
            ]
        )
    for step, spread in (p.get("timeline_s") or {}).items():
        if spread:
            figures = " / ".join(map(str, spread))
            rows.append([f"  {step} (s after apply: first / median / last)", figures, ""])
    rows.append(["CPU during provisioning (top 3)", _top(p["cpu_seconds"]), ""])
    return rows


def scale_to_zero_rows(s: dict[str, Any]) -> list[list[Any]]:
    fill = s["budget_utilisation"]
    return [
        [
            f"{s['nodes']} nodes provisioned one pod each",
            _seconds(s["provision_s"])
            if not s["pods_never_running"]
            else f"never: {s['pods_never_running']} pods not Running when progress stopped",
            "",
        ],
        [
            "delete -> no Node left",
            _seconds(s["delete_to_no_node_s"])
            if not s["nodes_left"]
            else f"never: {s['nodes_left']} left (claims stopped at {s['stuck_claims_last_step']})",
            f"Karpenter: {KARPENTER_FIELD_SCALE_TO_ZERO}",
        ],
        ["delete -> last NodeClaimTerminated (log)", _seconds(s["delete_to_last_terminated_s"]), ""],
        ["delete -> every MachineDeployment at 0", _seconds(s["delete_to_replicas_zero_s"]), ""],
        [
            "peak claims disrupted at once",
            f"{s['peak_disrupting']} (budget then {s['budget_at_peak']}; at the first request "
            f"{s['initial_budget']})",
            "ceil(10% of claims alive)",
        ],
        ["budget kept full (first -> last request)", "-" if fill is None else f"{fill:.0%}", ""],
        ["disruption decisions / claims disrupted", f"{s['decisions']} / {s['claims_disrupted']}", ""],
        ["CPU during scale to zero (top 3)", _top(s["cpu_seconds"]), ""],
    ]


def provisioning_targets(p: dict[str, Any]) -> list[Target]:
    running_s = p["all_running_s"]
    targets = [
        Target(
            f"{p['pods']} pending pods -> all Running",
            f"every pod Running, <= {ALL_RUNNING_TARGET_S:.0f} s",
            f"{p['pods'] - p['pods_never_running']} of {p['pods']} Running in {_seconds(running_s)}",
            not p["pods_never_running"] and running_s is not None and running_s <= ALL_RUNNING_TARGET_S,
        ),
        Target(
            "last Unschedulable -> every NodeClaim planned",
            f"< {PLANNING_TARGET_S:.2f} s",
            f"{p['last_unschedulable_to_all_planned_s']:.3f} s",
            p["last_unschedulable_to_all_planned_s"] < PLANNING_TARGET_S,
        ),
        Target(
            "last Unschedulable -> a NodeClaim planned for every pending pod (first wave)",
            f"< {PLANNING_TARGET_S:.2f} s",
            _seconds(p["last_unschedulable_to_first_wave_planned_s"]),
            p["last_unschedulable_to_first_wave_planned_s"] is not None
            and p["last_unschedulable_to_first_wave_planned_s"] < PLANNING_TARGET_S,
        ),
    ]
    targets += _plan_kept_targets(p)
    for hop in HOPS:
        figures = p["hops"].get(hop)
        if not figures:
            continue
        allowed_ms = (HOP_TARGET_S + SANDBOX_WAIT_S.get(hop, 0.0)) * 1000
        targets.append(
            Target(
                f"hop {hop} p99 (tenon's share <= {HOP_TARGET_S:.0f} s beyond the sandbox's wait)",
                f"<= {allowed_ms:.0f} ms",
                f"{figures['p99_ms']:.0f} ms",
                figures["p99_ms"] <= allowed_ms,
            )
        )
    return targets


def _plan_kept_targets(p: dict[str, Any]) -> list[Target]:
    """Issue 10: the plan the kube-scheduler keeps (few claims bought afterwards, and soon)."""
    leftovers, claims = p["claims_for_pods_offered_again"], p["claims"]
    share = leftovers / claims if claims else 0.0
    every = p["last_unschedulable_to_all_planned_s"]
    return [
        Target(
            "claims bought for pods the kube-scheduler placed otherwise (share of claims)",
            f"<= {LEFTOVER_SHARE_TARGET:.0%}",
            f"{leftovers} of {claims} ({share:.1%})",
            share <= LEFTOVER_SHARE_TARGET,
        ),
        Target(
            "last Unschedulable -> every claim planned, leftovers included",
            f"<= {EVERY_CLAIM_TARGET_S:.0f} s",
            f"{every:.3f} s",
            every <= EVERY_CLAIM_TARGET_S,
        ),
    ]


def scale_to_zero_targets(s: dict[str, Any]) -> list[Target]:
    gone_s = s["delete_to_no_node_s"]
    fill = s["budget_utilisation"]
    return [
        Target(
            f"{s['nodes']} empty nodes -> 0",
            f"every claim disrupted and terminated, no Node left, <= {SCALE_TO_ZERO_TARGET_S:.0f} s",
            f"{s['claims_disrupted']} of {s['claims']} disrupted, {s['claims_unfinished']} unfinished, "
            f"{s['nodes_left']} Nodes left, in {_seconds(gone_s)}",
            s["claims_disrupted"] == s["claims"]
            and s["claims_unfinished"] == 0
            and not s["nodes_left"]
            and gone_s is not None
            and gone_s <= SCALE_TO_ZERO_TARGET_S,
        ),
        Target(
            "disruption budget 10% never exceeded",
            "0 moments over budget",
            f"{s['budget_violations']} moments over "
            f"(peak {s['peak_disrupting']}, budget {s['budget_at_peak']})",
            s["budget_violations"] == 0,
        ),
        Target(
            "disruption budget kept full",
            f">= {BUDGET_FILL_TARGET:.0%} (time-weighted, first -> last request)",
            "-" if fill is None else f"{fill:.0%}",
            fill is not None and fill >= BUDGET_FILL_TARGET,
        ),
    ]
