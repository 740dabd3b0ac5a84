"""Serving under load, a module per scenario: load (`load`: open-loop Poisson load on tfm-export serve, the
batching modes taking turns; load_report its JSON rows and chart), engine (`engine`: the engines without HTTP)
and ct2_batch (`ct2-batch`: CTranslate2's static batches, the serving peer); workload is what they share."""
