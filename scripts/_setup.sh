# Shared by scripts/demo and scripts/test: Debian packages and the virtualenv. Sourced, not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

_apt_updated=0
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "need Debian packages: ${missing[*]} (run as root, or install them first)" >&2
    return 1
  fi
  if [ $_apt_updated = 0 ]; then apt-get update -qq; _apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python_ready() {
  command -v python3 >/dev/null && python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

setup_python() {
  python_ready || apt_install python3 python3-venv python3-pip
  if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  # uv installs the requirements (decision 0049): the same pinned versions as pip, about twice as fast. Bytecode is
  # compiled here, once, not by each of the test command's processes as it first imports a module.
  .venv/bin/python -m pip install -qq --disable-pip-version-check -c requirements/constraints.txt uv
  # The project itself too, editable: the `agenttest` command in .venv/bin, running this checkout's code.
  .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode -c requirements/constraints.txt -r "$1" -e .
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
