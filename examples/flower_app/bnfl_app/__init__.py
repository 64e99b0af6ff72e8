"""bnfl as a Flower App: the ServerApp and ClientApp of a bnfl run config (:mod:`bnfl.fl.flower`)."""
