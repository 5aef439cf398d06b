"""Merging the shards' vector infos into the infos of the whole batch.

Each shard returns the infos its local vector env built with Gymnasium's rules
(``VectorEnv._add_info``) over the shard's own envs: a dict whose keys appear in the
order its envs first showed them, each value an array over the shard's envs with a
``_key`` mask after it, nested dicts merged the same way. Merging those, shard after
shard, gives what ``_add_info`` builds env after env over the global indices:

- **keys and order**: a key new to the batch is added when the first shard that has it
  comes, after every key of earlier shards; in that shard it sits where its first env put
  it. That is the order of first appearance over the envs, masks right after their keys;
- **dtypes and shapes**: an array takes the dtype of the first shard that has the key,
  which is the dtype of the first env that has it, as in ``_add_info``; an object array
  starts filled as Gymnasium fills it (``None`` for other objects, ``0`` for object
  arrays from ndarray values);
- **values and masks**: each shard's masked rows are copied to its envs' rows; rows of
  envs without the key keep the fill, their mask False.

What differs from ``_add_info``: when the envs give one key values of different types,
each shard has already stored its envs' values in its own array (of the dtype its first
env gave), so a value reaches the batch through two conversions instead of one. They
agree whenever the shard's dtype holds the value exactly (an int into a float64 array,
any number into an object array); they differ, for example, for a float ``0.5`` that
shared a bool array with an earlier ``True`` of its shard. With one type per key (what
envs give), the merge is exact.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def _fill_of(value: np.ndarray, mask: np.ndarray, key: str):
    """What an object array of a shard holds where its envs had no value (see module doc)."""
    if key == "final_obs" or value.ndim == 1 and not (~mask).any():
        return None  # final_obs always; otherwise, the common case: non-number objects
    if value.ndim > 1:
        return 0  # np.zeros((n, *shape), dtype=object) from an object ndarray value
    return value[np.flatnonzero(~mask)[0]]


def merge_infos(out: dict[str, Any], shard: dict[str, Any], rows: np.ndarray, total: int) -> dict[str, Any]:
    """Merge one shard's vector infos into ``out`` (the batch's, built so far) and return it.

    Args:
        out: the batch's infos so far (``{}`` for the first shard with infos).
        shard: the shard's vector infos (``VectorEnv._add_info``'s form, over its envs).
        rows: the batch row of each of the shard's envs (int array, one per env).
        total: the batch size (the length of every array in ``out``).
    """
    for key, value in shard.items():
        if key[:1] == "_" and key[1:] in shard:
            continue  # the mask of a key merged with it
        mask = shard.get(f"_{key}")
        if mask is None:  # a value without a mask: not _add_info's form; take every row
            mask = np.ones(len(rows), dtype=np.bool_)
        where = rows[mask]
        if isinstance(value, dict):
            previous = out.get(key)
            array = merge_infos(previous if isinstance(previous, dict) else {}, value, rows, total)
        else:
            array = out.get(key)
            if array is None:
                if value.dtype == object:
                    array = np.empty((total, *value.shape[1:]), dtype=object)
                    array.fill(_fill_of(value, mask, key))
                else:
                    array = np.zeros((total, *value.shape[1:]), dtype=value.dtype)
            if array.dtype == object and value.dtype != object and value.ndim == 1:
                # _add_info stores the envs' own values in an object array; a shard's
                # numeric array holds them as NumPy numbers: give back Python ones.
                array[where] = np.array(value[mask].tolist() + [None], dtype=object)[:-1]
            else:
                array[where] = value[mask]
        array_mask = out.get(f"_{key}")
        if array_mask is None:
            array_mask = np.zeros(total, dtype=np.bool_)
        array_mask[where] = True
        out[key], out[f"_{key}"] = array, array_mask
    return out
