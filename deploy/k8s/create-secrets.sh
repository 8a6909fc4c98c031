#!/bin/sh
# The Secrets the base refers to, with fresh random values: the base ships none
# (kept in it, placeholder values would be deployed, and would overwrite these on
# every `kubectl apply -k`). Run once per namespace, before `kubectl apply -k`:
#   deploy/k8s/create-secrets.sh [namespace]
# Values are hex, so they need no escaping in the URLs. With an external
# PostgreSQL, replace database-url afterwards (docs/serving-k8s.md).
set -eu
ns=${1:-costmodel}
secret() { openssl rand -hex 32; }
db=$(secret) admin=$(secret) cache=$(secret) seal=$(secret)
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"
# password: the service's role (initdb.sh creates it, not a superuser);
# admin-password: PostgreSQL's superuser, for the operator alone.
kubectl -n "$ns" create secret generic costmodel-postgres \
  --from-literal=password="$db" \
  --from-literal=admin-password="$admin" \
  --from-literal=database-url="postgresql://costmodel:$db@postgres:5432/costmodel"
# password: the service's Redis user (redis.yaml's ACL: its keys and channel only);
# hmac-key: COSTMODEL_REDIS_HMAC_KEY, the seal of what the service keeps in Redis.
kubectl -n "$ns" create secret generic costmodel-redis \
  --from-literal=password="$cache" \
  --from-literal=redis-url="redis://costmodel:$cache@redis:6379/0" \
  --from-literal=hmac-key="$seal"
