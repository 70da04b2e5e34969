"""interruption-handler: EC2's interruption events (EventBridge -> SQS) as ``InterruptionNotice``.

It long-polls one SQS queue (10 messages, 20 s wait, 20 s visibility), puts each message in the log as it
was (``InterruptionMessageReceived``), decides from it (:mod:`.messages`: a spot interruption warning, a
rebalance recommendation, a state change to stopping/stopped/shutting-down/terminated, an AWS Health scheduled
change) an ``InterruptionNotice`` per instance of tenon's it names, and deletes the message from the queue
only once that is in the log. A malformed or unknown message goes to the dead-letter stream with its reason
and is deleted; a message about an instance tenon does not run is counted and deleted.

:mod:`.messages` (pure reading), :mod:`.state` (the fold), :mod:`.decider`, :mod:`.sqs` (boto3),
:mod:`.executor` (the loop), :mod:`.service` (settings, ``SERVICE``). The disruption service acts on the
notices.
"""
