"""The completions gateway: Scale GP's `POST /v5/completions` (the OpenAI legacy text-completions
contract) in front of many model vendors, with one key system and one usage ledger.

The package's folders are its layers; imports run one way (tests/unit/test_layers.py checks it):

    http/      request orchestration: `serve` (the one way of every inference endpoint), the
               lifecycle, the SSE writer, the response cache; server/: uvicorn, the connection,
               Connexion assembly and fast path, validation, security; observe/: metrics, traces,
               logs; ui/: the dashboard
      -> endpoints/ one unit per endpoint (completions/, chat/): its request rules, its call, its
                    demand, its cache form, its answer
           -> planner/   the one planner: plan, fan-out, verification, merging, emulations,
                         capabilities, fallbacks, admission
                -> vendors/   one folder per wire protocol (openai/, anthropic/, gemini/, local/),
                              each one translator per endpoint; transport/ (HTTP to vendors); registry
                     -> core/      errors, the endpoints, the vendor calls and what comes back, a
                                   request's clearance and demand, parameters and their support
                                   records, configuration
      -> limits/    limits on a key or an account: rules, table, counters, limiter, a request's check
           -> store/     database, tables, migrations, ledger, accounts and keys, usage reports, token
                         counting, the Redis client (-> core/ only)

Administration (`admin`: accounts, keys, limits, prices, each change audited) sits above limits and
store. At the top: `cli` (the `gateway` command) and `services` (the assembly of settings, vendors,
database, ledger and app). The contract (openapi.json), its generated models (generated/) and the
handlers per operation (handlers/) sit beside this package, as the design card asks.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("completions-gateway")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
