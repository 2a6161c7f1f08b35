# dflash-deploy: two commands for a newcomer (README.md, "Quick start"):
#   make deploy-lab   everything missing (apt podman/runc/debootstrap, controller venv, lab image),
#                     lab hosts up, then `ansible-playbook deploy.yml -l ct200` on the lab
#   make test         lint + unit + molecule, with each part's time
# LAB_PREFIX=<you>- keeps your lab and Molecule containers apart from everybody else's.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

REPO := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV := $(REPO)/.venv
LAB_PREFIX ?=
export LAB_PREFIX
export PATH := $(VENV)/bin:$(PATH)
export CONTAINERS_CONF := $(REPO)/lab/containers.conf
export ANSIBLE_CONFIG := $(REPO)/ansible.cfg
LIMIT ?= ct200
# With a prefix, labctl writes lab/.inv/<prefix>.yml mapping ct129/ct200 to your containers.
LAB_INVENTORY := -i inventory/lab $(if $(LAB_PREFIX),-i lab/.inv/$(patsubst %-,%,$(LAB_PREFIX)).yml)
SCENARIOS ?=

.PHONY: help deps controller controller-deploy promtool lab-image lab-up lab-down deploy-lab lint unit molecule test

help:
	@sed -n '1,6p' Makefile | sed 's/^# \{0,1\}//'
	@echo "targets: deps controller controller-deploy lab-image lab-up lab-down deploy-lab lint unit molecule test promtool"

deps: ## apt packages the lab needs (podman, runc, debootstrap), only when missing
	@missing=""; for t in podman runc debootstrap curl; do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing; \
	fi

controller: ## development install: .venv from uv.lock with the dev group + containers.podman from the pinned ansible wheel
	@scripts/controller.sh

controller-deploy: ## deploy-only install: .venv from uv.lock without the dev group (no test tooling, torch, triton)
	@scripts/controller.sh deploy

promtool: ## promtool for the alert rules' tests: on PATH, else Debian's prometheus package unpacked into .cache/ (only when missing)
	@scripts/promtool.sh >/dev/null

lab-image: deps ## dflash-lab:<recipe-hash> (skipped when it exists)
	@lab/build-image.sh

lab-up: controller lab-image
	@lab/labctl up

lab-down:
	@lab/labctl down

deploy-lab: deps controller lab-image lab-up
	ansible-playbook $(LAB_INVENTORY) deploy.yml -l $(LIMIT)

lint: controller
	@echo "== ansible-lint (production profile)"; ansible-lint
	@echo "== yamllint"; yamllint -s .
	@echo "== ruff"; ruff check .
	@echo "== argument_specs mirror defaults"; python scripts/check_argument_specs.py
	@echo "== module_utils: no import circle"; python scripts/module_graph.py check

unit: controller promtool ## the test files spread over the cores (pytest-xdist; PYTEST_WORKERS=1: one process; UNIT_NICE=n: at nice n)
	$(if $(UNIT_NICE),nice -n $(UNIT_NICE)) pytest -q $(if $(filter 1,$(PYTEST_WORKERS)),,-n $(or $(PYTEST_WORKERS),auto) --dist loadfile)

molecule: controller lab-image ## every scenario under molecule/ (or SCENARIOS=...), MOLECULE_JOBS (default 3) at a time; all run, fails if one failed
	@scripts/molecule_all.sh $(SCENARIOS)

# make test: the three side by side. Molecule's scenarios wait on containers and servers part of the time (about a
# seventh of two cores stays idle with two at a time): the unit tests, at a lower priority, fill that time instead
# of running first on their own.
test: ## lint + unit + molecule side by side, each part timed; all parts run, fails if one failed
	@UNIT_NICE=10 scripts/timed.sh lint+unit+molecule
