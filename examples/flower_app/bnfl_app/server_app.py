"""The ServerApp: bnfl's rounds (participation, aggregation, evaluation, history) over the grid."""

from bnfl.fl.flower import server_app

from .runconfig import setup

app = server_app(setup)
