"""The ClientApp: each node trains its client (its ``partition-id``) with bnfl's local steps."""

from bnfl.fl.flower import client_app

from .runconfig import setup

app = client_app(setup)
