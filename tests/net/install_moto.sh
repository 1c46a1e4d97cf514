#!/usr/bin/env bash
# Install moto's S3 server (moto[server]: Debian 12 has no package) into
# build/moto-venv, for tests/net/servers.py's moto_server(). A virtual
# environment of its own (Debian's /usr/bin/python3, no system site packages),
# so moto's dependencies (Flask, Werkzeug, boto3...) never mix with Debian's
# python3-botocore that the tests use as the client. Idempotent: does nothing
# when the server is already there. pip's output goes to build/moto-venv.log,
# printed on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=build/moto-venv
log=build/moto-venv.log
if [ -x "$venv/bin/moto_server" ] && "$venv/bin/python" -c 'import moto.server' 2> /dev/null; then
  echo "install_moto: $venv/bin/moto_server present"
  exit 0
fi
mkdir -p build
rm -rf "$venv"
if ! { /usr/bin/python3 -m venv "$venv" &&
       "$venv/bin/pip" install --disable-pip-version-check -q "moto[server]>=5,<6"; } > "$log" 2>&1; then
  cat "$log"
  rm -rf "$venv"
  echo "install_moto: could not install moto[server] into $venv (log above)" >&2
  exit 1
fi
echo "install_moto: moto $("$venv/bin/python" -c 'import moto; print(moto.__version__)') in $venv"
