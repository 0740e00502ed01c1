#!/usr/bin/env bash
# gpushare-extender under hostile traffic and over HTTPS, on loopback:
#  1. tests/extender/hostile_test.py: oversized bodies, bad Content-Length, long
#     lines and headers, slowloris, many large bodies at once (RSS read from
#     /proc), TLS certificates and client certificates, the access log. Each
#     test starts servers of its own.
#  2. tests/extender/e2e_test.py once over HTTPS: a CA and a server certificate for
#     127.0.0.1 made with the openssl command, verified by the client.
# About a minute; the server is always stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/extender.sh

(cd tests/extender && GPUSHARE_EXTENDER="$bin" python3 hostile_test.py -v)

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=gpushare e2e CA" \
        -keyout "$tmp/ca.key" -out "$tmp/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=gpushare-extender" \
        -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$tmp/san.ext"
openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
        -CAcreateserial -days 2 -extfile "$tmp/san.ext" -out "$tmp/server.crt" 2>/dev/null

start_sample_extender --tls-cert-file "$tmp/server.crt" --tls-private-key-file "$tmp/server.key" \
                      --access-log "$tmp/access.log"
echo "extender listening on https://127.0.0.1:$port"
GPUSHARE_EXTENDER_URL="https://127.0.0.1:$port" GPUSHARE_EXTENDER_CA="$tmp/ca.crt" \
  GPUSHARE_EXTENDER="$bin" python3 tests/extender/e2e_test.py -v ExtenderE2ETest
echo "$(wc -l <"$tmp/access.log") requests served over HTTPS"
