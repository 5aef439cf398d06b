"""Example envs on the native-env kit, installed with fastvec (their sources live in the
repository's ``examples/``): ``fastvec.native.examples.gridworld`` is ``examples/native_env``'s
grid world. Importing one registers its ids."""
import os

# An installed fastvec has the examples here (setup.py maps them into this package); a source
# checkout (PYTHONPATH=src after build_ext --inplace) finds them in the repository's examples/.
_checkout = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, os.pardir,
                         "examples", "native_env")
if os.path.isdir(_checkout):
    __path__.append(os.path.normpath(_checkout))
