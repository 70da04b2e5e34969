#!/usr/bin/env sh
# Creates Secret tenon-nats-credentials: one random password per NATS user (each tenon service, and "operator"
# for people running tenon tap / explain / replay). Run once before applying an overlay with the NATS component;
# running it again leaves an existing Secret alone (delete it first to rotate, then restart NATS and tenon).
#
#   deploy/components/nats/make-credentials.sh [namespace]     (default: tenon)
set -eu
namespace="${1:-tenon}"
if kubectl get secret tenon-nats-credentials --namespace "$namespace" >/dev/null 2>&1; then
  echo "secret $namespace/tenon-nats-credentials exists; left as it is"
  exit 0
fi
kubectl get namespace "$namespace" >/dev/null 2>&1 || kubectl create namespace "$namespace"
set --
for user in pod-watcher scheduler disruption launcher-capi launcher-ec2 interruption-handler operator; do
  set -- "$@" "--from-literal=$user=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
done
kubectl create secret generic tenon-nats-credentials --namespace "$namespace" "$@"
