"""Inputs, validated once at the door: the target model, the audit data, the recipe's entry point, the config.

Everything a user hands privgate (files, ``module:attr`` specs, YAML and TOML)
is read and checked here, with one clear sentence naming the file or field at
fault (:class:`privgate.errors.PrivgateError`); the code behind trusts it.
"""
