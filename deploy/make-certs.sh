#!/usr/bin/env bash
# The certificates of deploy/: a CA, the extender's certificate (server and
# client: the replicas forward binds to each other) and kube-scheduler's
# client certificate, written to DIR (default ./gpushare-certs):
#
#   deploy/make-certs.sh [DIR] [--apply]
#
#   ca.crt ca.key             the CA (keep ca.key out of the cluster)
#   tls.crt tls.key           gpushare-extender: DNS names
#                             gpushare-extender.kube-system.svc (what
#                             kube-scheduler calls) and
#                             *.gpushare-extender-peers.kube-system.svc (the
#                             leader URL of each replica); serverAuth, clientAuth
#   scheduler.crt scheduler.key  kube-scheduler's client certificate (clientAuth)
#
# --apply creates or updates the Secret kube-system/gpushare-extender-tls
# (ca.crt, tls.crt, tls.key) with kubectl. Copy ca.crt, scheduler.crt and
# scheduler.key to kube-scheduler's host, where its configuration
# (base/scheduler-config.yaml) names them. Certificates last DAYS (365).
#
# Renewal: run it again on the same DIR. A CA already there (ca.crt and
# ca.key) is kept, so kube-scheduler's hosts keep trusting the extender, and
# only the two certificates are issued again; with --apply the Secret is
# updated, and the extender serves the new certificate without a restart
# (it reads its TLS files again when they change; the kubelet refreshes the
# Secret's volume within a minute or two). Copy the new scheduler.crt and
# scheduler.key to kube-scheduler's hosts too.
set -euo pipefail
dir=gpushare-certs
apply=false
for arg in "$@"; do
  case "$arg" in
    --apply) apply=true ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "make-certs.sh: unknown option $arg" >&2; exit 2 ;;
    *) dir=$arg ;;
  esac
done
days=${DAYS:-365}
ns=kube-system
mkdir -p "$dir"
cd "$dir"
umask 077

if [ -s ca.crt ] && [ -s ca.key ]; then
  echo "make-certs.sh: keeping the CA of $(pwd) (renewing the certificates it signs)"
else
  openssl req -x509 -newkey rsa:3072 -nodes -days "$days" -subj "/CN=gpushare-extender CA" \
    -keyout ca.key -out ca.crt 2>/dev/null
fi

# sign NAME SUBJECT EXTENSIONS: NAME.key and NAME.crt signed by the CA.
sign() {
  openssl req -newkey rsa:3072 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign tls "/CN=gpushare-extender.$ns.svc" \
  "subjectAltName=DNS:gpushare-extender.$ns.svc,DNS:gpushare-extender.$ns.svc.cluster.local,DNS:*.gpushare-extender-peers.$ns.svc,DNS:*.gpushare-extender-peers.$ns.svc.cluster.local
extendedKeyUsage=serverAuth,clientAuth
keyUsage=digitalSignature,keyEncipherment"
sign scheduler "/CN=system:kube-scheduler" \
  "extendedKeyUsage=clientAuth
keyUsage=digitalSignature,keyEncipherment"
rm -f ca.srl
chmod 0644 ca.crt tls.crt scheduler.crt
echo "make-certs.sh: wrote $(pwd)/{ca,tls,scheduler}.{crt,key}"

if $apply; then
  kubectl -n "$ns" create secret generic gpushare-extender-tls \
    --from-file=ca.crt --from-file=tls.crt --from-file=tls.key --dry-run=client -o yaml |
    kubectl apply -f -
else
  echo "then: kubectl -n $ns create secret generic gpushare-extender-tls" \
       "--from-file=$(pwd)/ca.crt --from-file=$(pwd)/tls.crt --from-file=$(pwd)/tls.key"
fi
