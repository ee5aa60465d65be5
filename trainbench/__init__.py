"""What a training program may import to talk to trainbench: `report` (exact step figures for
a `model: command` case). Standard library only: it runs in the user's interpreter, which may
have none of the toolkit's dependencies."""
