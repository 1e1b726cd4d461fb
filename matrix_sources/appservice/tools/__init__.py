"""The demo and the local-Synapse tooling (tests and benchmarks use them too). The service
does not need them at run time: nothing outside tools/ and cli/ (the `demo` command)
imports them."""
