"""A small knowledge base and diagnosed runs for the query/suggest/server tests (support module, no tests).

The knowledge items mirror DESIGN §2 names; numbers are chosen so the expected ranking can be worked
out by hand in the tests (see tests/test_suggest.py).
"""

from __future__ import annotations

from debugtune import cases, ontology
from debugtune.kg import Store, open_store
from debugtune.kg.assertions import add_experiments, replace_diagnosis
from debugtune.kg.knowledge import KnowledgeSource, load_knowledge
from debugtune.kg.namespaces import GRAPH_KB, GRAPH_LOCAL, GRAPH_ONTOLOGY, package_graph
from debugtune.kg.records import Experiment, Finding, Hypothesis

PACKAGE = package_graph("0f" * 32)

KB_TTL = """@prefix dt: <https://w3id.org/debugtune#> . @prefix kb: <https://w3id.org/debugtune/kb/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> . @prefix dct: <http://purl.org/dc/terms/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
kb:GateInitBias a dt:Cause ; skos:prefLabel "gate initialisation bias"@en ; skos:altLabel "router init bias"@en ;
  skos:definition "d"@en ; dct:source <https://arxiv.org/abs/2101.03961> .
kb:AuxLossDisabled a dt:Cause ; skos:prefLabel "auxiliary loss disabled"@en ; skos:definition "d"@en ;
  dct:source <https://arxiv.org/abs/2101.03961> .
kb:LearningRateTooHigh a dt:Cause ; skos:prefLabel "learning rate too high"@en ; skos:definition "d"@en ;
  dct:source <https://arxiv.org/abs/1706.02677> .
kb:ExpertImbalance a dt:Symptom ; dt:inDimension dt:ConvergenceFlow ; skos:prefLabel "expert imbalance"@en ;
  skos:definition "d"@en ; dct:source <https://arxiv.org/abs/2101.03961> .
kb:LossOscillation a dt:Symptom ; dt:inDimension dt:ConvergenceFlow ; skos:prefLabel "loss oscillation"@en ;
  skos:definition "d"@en ; dct:source <https://arxiv.org/abs/2101.03961> .
kb:GradientExplosion a dt:Symptom ; dt:inDimension dt:GradientFlow ; skos:prefLabel "gradient explosion"@en ;
  skos:definition "d"@en ; dct:source <https://arxiv.org/abs/1211.5063> .
kb:RouterGradVanishing a dt:Symptom ; dt:inDimension dt:GradientFlow ;
  skos:prefLabel "router gradient vanishing"@en ; skos:definition "d"@en ;
  dct:source <https://arxiv.org/abs/2101.03961> .
kb:l1 a dt:CausalLink ; dt:from kb:GateInitBias ; dt:to kb:ExpertImbalance ; dt:strength 0.8 ;
  dct:source <https://arxiv.org/abs/2101.03961> .
kb:l2 a dt:CausalLink ; dt:from kb:ExpertImbalance ; dt:to kb:LossOscillation ; dt:strength 0.6 ;
  dct:source <https://arxiv.org/abs/2101.03961> .
kb:l3 a dt:CausalLink ; dt:from kb:LearningRateTooHigh ; dt:to kb:GradientExplosion ; dt:strength 0.7 ;
  dct:source <https://arxiv.org/abs/1211.5063> .

kb:RouterInitRescale a dt:Remedy ; skos:prefLabel "rescale router initialisation"@en ; skos:definition "d"@en ;
  dct:source <https://arxiv.org/abs/2101.03961> ;
  dt:addresses kb:GateInitBias ; dt:effectiveness 0.8 ; dt:cost 2300.0 ; dt:hasRisk dt:LowRisk ;
  dt:successCount 8 ; dt:failureCount 2 ; dt:maxExperiments 5 ;
  dt:tuningParameter [ a dt:TuningParameter ; dt:paramName "init_std" ; dt:parameterKind dt:Continuous ;
                       dt:scale dt:LogScale ; dt:minValue 0.0001 ; dt:maxValue 0.1 ; dt:defaultValue 0.02 ] ,
                     [ a dt:TuningParameter ; dt:paramName "router_dtype" ; dt:parameterKind dt:Categorical ;
                       dt:choice "fp32" , "bf16" ; dt:defaultValue "bf16" ] ;
  dt:configChange [ a dt:ConfigChange ; dt:configKey "init_method_std" ; dt:fromValue "0.02" ; dt:toValue "x0.1" ] .
kb:EnableAuxLoss a dt:Remedy ; skos:prefLabel "enable the auxiliary load-balancing loss"@en ;
  skos:definition "d"@en ; dct:source <https://arxiv.org/abs/2101.03961> ;
  dt:addresses kb:AuxLossDisabled , kb:GateInitBias ; dt:effectiveness 0.9 ; dt:cost 800.0 ; dt:hasRisk dt:LowRisk ;
  dt:successCount 5 ; dt:failureCount 0 ; dt:maxExperiments 3 ;
  dt:tuningParameter [ a dt:TuningParameter ; dt:paramName "aux_coef" ; dt:parameterKind dt:Continuous ;
                       dt:scale dt:LogScale ; dt:minValue 0.0001 ; dt:maxValue 0.1 ; dt:defaultValue 0.01 ] ;
  dt:configChange [ a dt:ConfigChange ; dt:configKey "moe_aux_loss_coeff" ; dt:toValue "0.01" ] .
kb:RestartWithNewSeed a dt:Remedy ; skos:prefLabel "restart with a new seed"@en ; skos:definition "d"@en ;
  dct:source <https://arxiv.org/abs/2101.03961> ;
  dt:addresses kb:GateInitBias ; dt:effectiveness 0.95 ; dt:cost 12500.0 ; dt:hasRisk dt:HighRisk ;
  dt:maxExperiments 10 ;
  dt:tuningParameter [ a dt:TuningParameter ; dt:paramName "seed" ; dt:parameterKind dt:Integer ;
                       dt:minValue 0 ; dt:maxValue 1000 ; dt:defaultValue 1 ] .
kb:LowerLearningRate a dt:Remedy ; skos:prefLabel "lower the learning rate"@en ; skos:definition "d"@en ;
  dct:source <https://arxiv.org/abs/1706.02677> ;
  dt:addresses kb:LearningRateTooHigh ; dt:effectiveness 0.7 ; dt:cost 5000.0 ; dt:hasRisk dt:MediumRisk ;
  dt:successCount 1 ; dt:failureCount 1 ;
  dt:tuningParameter [ a dt:TuningParameter ; dt:paramName "lr_scale" ; dt:parameterKind dt:Continuous ;
                       dt:scale dt:LogScale ; dt:minValue 0.01 ; dt:maxValue 1.0 ; dt:defaultValue 0.5 ] .

kb:CaseKb1 a dt:Case ; skos:prefLabel "MoE gate bias, 8 experts"@en ; dct:source <https://example.org/logbook/1> ;
  dt:signature [ a dt:SignatureItem ; dt:symptom kb:ExpertImbalance ; dt:locationKind dt:ExpertLocation ;
                 dt:severity 0.8 ] ,
               [ a dt:SignatureItem ; dt:symptom kb:LossOscillation ; dt:locationKind dt:RunLocation ;
                 dt:severity 0.6 ] ;
  dt:confirmedCause kb:GateInitBias ; dt:appliedRemedy kb:RouterInitRescale ; dt:outcome dt:Success .
kb:CaseKb2 a dt:Case ; skos:prefLabel "LR too high, dense"@en ; dct:source <https://example.org/logbook/2> ;
  dt:signature [ a dt:SignatureItem ; dt:symptom kb:GradientExplosion ; dt:locationKind dt:LayerLocation ;
                 dt:severity 0.9 ] ;
  dt:confirmedCause kb:LearningRateTooHigh ; dt:appliedRemedy kb:LowerLearningRate ; dt:outcome dt:Failure .
"""

PACKAGE_TTL = """@prefix dt: <https://w3id.org/debugtune#> . @prefix kb: <https://w3id.org/debugtune/kb/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> . @prefix dct: <http://purl.org/dc/terms/> .
<urn:debugtune:case:pkg1> a dt:Case ; skos:prefLabel "imported: gate bias, 16 experts"@en ;
  dct:source <https://example.org/package/1> ;
  dt:signature [ a dt:SignatureItem ; dt:symptom kb:ExpertImbalance ; dt:locationKind dt:ExpertLocation ;
                 dt:severity 0.7 ] ,
               [ a dt:SignatureItem ; dt:symptom kb:LossOscillation ; dt:locationKind dt:RunLocation ;
                 dt:severity 0.5 ] ;
  dt:confirmedCause kb:GateInitBias ; dt:appliedRemedy kb:RouterInitRescale ; dt:outcome dt:Success ;
  dt:hasExperiment <urn:debugtune:case:pkg1/experiment/e1> , <urn:debugtune:case:pkg1/experiment/e2> .
<urn:debugtune:case:pkg1/experiment/e1> a dt:Experiment ; dt:remedy kb:RouterInitRescale ;
  skos:prefLabel "e1" ; dt:parametersJson "{\\"init_std\\": 0.002}" ; dt:cost 0.5 ; dt:seed 1 ; dt:status dt:StatusOk .
<urn:debugtune:case:pkg1/experiment/e2> a dt:Experiment ; dt:remedy kb:RouterInitRescale ;
  skos:prefLabel "e2" ; dt:parametersJson "{\\"init_std\\": 0.05}" ; dt:cost 0.5 ; dt:seed 2 ;
  dt:status dt:StatusFailed .
<urn:debugtune:case:pkg2> a dt:Case ; skos:prefLabel "imported: aux loss off"@en ;
  dct:source <https://example.org/package/2> ;
  dt:signature [ a dt:SignatureItem ; dt:symptom kb:ExpertImbalance ; dt:locationKind dt:ExpertLocation ;
                 dt:severity 0.9 ] ;
  dt:confirmedCause kb:AuxLossDisabled ; dt:appliedRemedy kb:EnableAuxLoss ; dt:outcome dt:Partial .
"""

MOE_FINDINGS = [
    Finding("f1", "ExpertImbalance", "convergence", "layers.3/expert:5", 120, 400, 0.8, {"cv": 0.9}, "imbalance"),
    Finding("f2", "ExpertImbalance", "convergence", "layers.5/expert:1", 130, 400, 0.6, {"cv": 0.7}, "imbalance"),
    Finding("f3", "LossOscillation", "convergence", "", 200, 400, 0.6, {"period": 128.0}, "oscillation"),
    Finding("f4", "RouterGradVanishing", "gradient", "layers.3.router", 100, 300, 0.3, {"ratio": 0.01}, "zero"),
]
MOE_HYPOTHESES = [
    Hypothesis("GateInitBias", 0.7, ("GateInitBias", "ExpertImbalance", "LossOscillation"), ("f1", "f3"),
               "Router initialised with a bias: expert 5 takes 40% of tokens.", rank=1),
    Hypothesis("AuxLossDisabled", 0.2, ("AuxLossDisabled", "ExpertImbalance"), ("f1", "f2"),
               "No auxiliary loss keeps the load unbalanced.", rank=2),
]
DENSE_FINDINGS = [
    Finding("g1", "GradientExplosion", "gradient", "layers.0.attn", 50, 60, 0.9, {"norm": 1e4}, "spike"),
]
DENSE_HYPOTHESES = [
    Hypothesis("LearningRateTooHigh", 0.9, ("LearningRateTooHigh", "GradientExplosion"), ("g1",),
               "Gradient norm x1000 right after warm-up.", rank=1),
]


TEST_KB_GRAPH = package_graph("test-kb")


def load_test_kb(store: Store, *, shipped_kb: bool = False) -> None:
    """The ontology, the suggestion thresholds, the test KB, a package graph and three runs.

    With ``shipped_kb`` the whole shipped knowledge base is loaded and the test KB goes into a graph of
    its own (so `load_knowledge`, which the CLI runs, keeps it); otherwise only the ontology and
    ``cases/thresholds/suggest.ttl`` are loaded, and the test KB is the KB graph.
    """
    if shipped_kb:
        load_knowledge(store)
        store.load_data(KB_TTL, graph=TEST_KB_GRAPH)
    else:
        thresholds = cases.HERE / "thresholds" / "suggest.ttl"
        load_knowledge(store, sources=[KnowledgeSource(GRAPH_ONTOLOGY, (ontology.ONTOLOGY,)),
                                       KnowledgeSource(GRAPH_KB, (thresholds,))])
        store.load_data(KB_TTL, graph=GRAPH_KB)
    store.load_data(PACKAGE_TTL, graph=PACKAGE)
    replace_diagnosis(store, "moe-1", {"run_dir": "/data/runs/moe-1", "steps": 500}, MOE_FINDINGS,
                      hypotheses=MOE_HYPOTHESES)
    replace_diagnosis(store, "dense-1", {"run_dir": "/data/runs/dense-1"}, DENSE_FINDINGS,
                      hypotheses=DENSE_HYPOTHESES)
    replace_diagnosis(store, "clean-1", {}, [])
    add_experiments(store, "moe-1", [
        Experiment("t1", "RouterInitRescale", {"init_std": 0.004}, {"cv": 0.12, "loss": 2.1}, 0.25, 7),
        Experiment("t2", "RouterInitRescale", {"init_std": 0.08}, {"cv": 0.4, "loss": 2.3}, 0.25, 8, "failed"),
    ])


def make_store() -> Store:
    """A fresh in-memory store holding `load_test_kb`."""
    store = open_store(None)
    load_test_kb(store)
    return store


__all__ = ["GRAPH_LOCAL", "PACKAGE", "TEST_KB_GRAPH", "load_test_kb", "make_store"]
