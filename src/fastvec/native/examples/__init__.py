"""Example envs on the native-env kit, installed with fastvec (their sources live in the
repository's ``examples/``): ``fastvec.native.examples.gridworld`` is ``examples/native_env``'s
grid world. Importing one registers its ids."""
