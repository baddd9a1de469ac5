"""How gradients travel between workers: one module per protocol, chosen by the codec's declaration.

Every protocol is a function ``run(ex, grads, keys) -> averaged`` over an
:class:`~gcbench.envs.exchange.Exchange` (``grads[i][j]``: local worker ``i``'s gradient of tensor
``keys[j]``; the result: one averaged tensor per key, every worker's). The codec class says which
one it needs (``protocol``, :mod:`gcbench.compressors.base`):

* :mod:`.all_reduce` - linear codecs: payloads summed in one all_reduce per section dtype.
* :mod:`.all_gather` - every other codec: serialized payloads all_gathered, decoded, averaged.
* :mod:`.rounds` - codecs that run their own rounds of all-reduces (PowerSGD's two factors,
  Sketched-SGD's sketch and exact values): the codec's ``run_rounds`` with the exchange's all-reduce.

:mod:`.parameter_server` is a topology, not a protocol: push to one server, pull the average
(simulated in one process), for codecs of the first two protocols.

Adding a protocol: a module here with a ``run`` function and a line in :data:`PROTOCOLS`; a codec
then declares ``protocol = "<name>"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..exchange import Exchange
from . import all_gather, all_reduce, rounds

Protocol = Callable[[Exchange, Sequence[Sequence[torch.Tensor]], Sequence[str]], list[torch.Tensor]]

#: Protocol name (a codec's ``protocol`` declaration) -> its implementation.
PROTOCOLS: dict[str, Protocol] = {
    "all_reduce": all_reduce.run,
    "all_gather": all_gather.run,
    "rounds": rounds.run,
}
