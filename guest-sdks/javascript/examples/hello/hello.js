// hello: hook "greet" turns the string "Ada" into "Hello, Ada!".
import { Fail, Plugin, config, definePlugin, hook } from "wasmext";

class Hello extends Plugin {
  info() { return { name: "hello", version: "0.1.0" }; }

  hooks() {
    return [hook("greet", (name) => {
      if (typeof name !== "string") throw new Fail("invalid", "greet expects a string");
      return `${config("greeting", "Hello")}, ${name}!`;
    })];
  }
}

export const { register, call } = definePlugin(new Hello());
