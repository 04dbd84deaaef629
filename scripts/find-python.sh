# Sourced by the bench and helper scripts (bash):
#
#   PY=$(loom_python)            # a python3 that imports numpy
#   PY=$(loom_python jinja2)     # ... that imports jinja2
#
# prints the first python3 that imports every MODULE given (numpy when none is): $LOOM_PYTHON
# when it is set, else each python3 on PATH in order. The first python3 on PATH need not be the
# one with the packages (a pyenv or virtualenv interpreter often comes before the system's, which
# has python3-numpy and python3-jinja2 from scripts/install-deps.sh). CMake finds the tests'
# interpreter the same way (cmake/LoomPython.cmake). Fails with a message when none qualifies.
loom_python() {
  local modules=("$@") candidates=() p
  [ ${#modules[@]} -gt 0 ] || modules=(numpy)
  local imports
  imports="import $(IFS=,; echo "${modules[*]}")"
  if [ -n "${LOOM_PYTHON:-}" ]; then
    candidates=("$LOOM_PYTHON")
  else
    mapfile -t candidates < <(type -ap python3)
  fi
  for p in "${candidates[@]}"; do
    if "$p" -c "$imports" > /dev/null 2>&1; then
      echo "$p"
      return 0
    fi
  done
  if [ -n "${LOOM_PYTHON:-}" ]; then
    echo "error: LOOM_PYTHON=$LOOM_PYTHON cannot import ${modules[*]}" >&2
  else
    echo "error: no python3 on PATH imports ${modules[*]}: run scripts/install-deps.sh or set LOOM_PYTHON" >&2
  fi
  return 1
}
