"""The tuning DSL: grammar, AST, compiler to SPARQL and result shaping."""
