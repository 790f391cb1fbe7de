//! `synth`: compiles a cluster blueprint into one CloudFormation template.
