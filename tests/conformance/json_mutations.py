"""Single-field mutations of JSON documents, for the hostile-request and broken-config tests."""
import copy

REMOVE = object()  # a mutation that deletes the field


def paths(value, prefix=(), list_items=None):
    """Every field's path below `value` (keys and list indices; the first `list_items` items of
    each list, all when None), parents before children."""
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,), list_items)
    elif isinstance(value, list):
        for i, v in enumerate(value[:list_items]):
            yield from paths(v, prefix + (i,), list_items)


def mutated(document, path, value):
    """A copy of `document` with the field at `path` set to `value`, or deleted for REMOVE."""
    out = copy.deepcopy(document)
    holder = out
    for k in path[:-1]:
        holder = holder[k]
    if value is REMOVE:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return out
