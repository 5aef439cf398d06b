"""The VectorEnv backends, one class per file."""
from fastvec.vector.native import NativeVectorEnv
