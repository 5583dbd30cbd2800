"""The pure decision core: plain dataclasses and functions, standard library only, `now` passed in. Services and controllers load state, call it, and write what it decides."""
